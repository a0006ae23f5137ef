package sdk_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// The reads, against the real API, relay and workers buying from the
// simulator: a label by id (with its printable document), a label request by
// id and by key; and what an error of the API tells.
func TestReads(t *testing.T) {
	t.Parallel()
	s := stacktest.NewSim(t, stacktest.SimOpts{})
	tok := s.Token("fulfilment")
	c := newClient(s, tok)

	p := parcel(4001, 1)
	created, err := c.CreateLabel(ctx(t), p)
	require.NoError(t, err)

	got, err := c.GetLabel(ctx(t), created.LabelID)
	require.NoError(t, err)
	require.Equal(t, created, got, "GET /v1/labels/{id} is the label CreateLabel returned")

	// The label document the carrier named: fetch it where it says.
	require.NotNil(t, got.Document, "the simulator names a document")
	require.Equal(t, "application/pdf", got.Document.ContentType)
	h, doc := fetchAtCarrier(t, got.Document)
	require.Equal(t, got.Document.ContentType, h.Get("Content-Type"))
	require.Equal(t, strconv.FormatInt(got.Document.SizeBytes, 10), h.Get("Content-Length"))
	require.Len(t, doc, int(got.Document.SizeBytes))
	require.Contains(t, string(doc), got.TrackingNo)

	byKey, err := c.FindByKey(ctx(t), client.DeriveKey(p))
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, byKey.Status)
	require.Equal(t, client.DeriveKey(p), byKey.IdempotencyKey)
	require.NotNil(t, byKey.CompletedAt)
	createdJSON, err := json.Marshal(created)
	require.NoError(t, err)
	require.JSONEq(t, string(createdJSON), string(byKey.Label))

	byID, err := c.GetLabelRequest(ctx(t), byKey.ID)
	require.NoError(t, err)
	require.Equal(t, byKey, byID)

	// Pending: a request read while the purchase cannot finish.
	opts := s.Sim.Options()
	opts.FailRate = 1
	require.NoError(t, s.Sim.SetOptions(opts))
	pending := parcel(4002, 1)
	_, err = newClient(s, tok, client.WithWait(0), client.WithMaxWait(0)).CreateLabel(ctx(t), pending)
	require.ErrorIs(t, err, client.ErrPending)
	lr, err := c.FindByKey(ctx(t), client.DeriveKey(pending))
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, lr.Status)
	require.Nil(t, lr.CompletedAt)
	opts.FailRate = 0
	require.NoError(t, s.Sim.SetOptions(opts))

	// Not the caller's, or nothing at all: 404, with the server's request id.
	other := newClient(s, s.Token("billing"))
	for _, read := range []func() error{
		func() error { _, err := other.GetLabel(ctx(t), created.LabelID); return err },
		func() error { _, err := other.GetLabelRequest(ctx(t), byKey.ID); return err },
		func() error { _, err := other.FindByKey(ctx(t), client.DeriveKey(p)); return err },
		func() error { _, err := c.GetLabel(ctx(t), "lbl_nope"); return err },
	} {
		err := read()
		pe := requireNotFound(t, err)
		require.NotEmpty(t, pe.HTTPRequestID, "the server's X-Request-Id")
		require.Contains(t, err.Error(), "(X-Request-Id "+pe.HTTPRequestID+")")
	}
	_, err = c.FindByKey(ctx(t), "has space")
	require.ErrorIs(t, err, client.ErrInvalidKey, "a key the API would refuse is never sent")
}

// A 400's error lists every invalid field with its message.
func TestInvalidRequestErrorListsFields(t *testing.T) {
	t.Parallel()
	s := stacktest.NewSim(t, stacktest.SimOpts{})
	c := newClient(s, s.Token("fulfilment"))
	p := parcel(4101, 1)
	p.WeightG = 0
	p.ShipTo.Country = "de"
	_, err := c.CreateLabel(ctx(t), p)
	require.ErrorIs(t, err, client.ErrInvalidRequest)
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Problem.Errors, 2)
	require.NotEmpty(t, pe.HTTPRequestID)
	msg := err.Error()
	require.Contains(t, msg, `labels: key "label:4101:1:v1": 400 invalid_request: the request body is invalid: see errors: `)
	for _, fe := range pe.Problem.Errors {
		require.Contains(t, msg, fe.Field+": "+fe.Message)
	}
	require.Contains(t, msg, "weight_g: ")
	require.Contains(t, msg, "ship_to.country: ")
	require.Zero(t, s.Purchases(p.OrderID, p.ParcelNo), "nothing was bought")
}
