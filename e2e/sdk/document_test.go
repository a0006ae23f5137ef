package sdk_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// GET /v1/labels/{label_id}/document through the client, against the real
// API, relay and workers buying from the simulator: the label's owner gets
// the carrier's bytes with the caller's token alone; anyone else, like an
// unknown id, gets the same 404; the ETag makes a repeat a 304; and a
// carrier that does not answer is a 502 carrier_unavailable with
// Retry-After.
func TestLabelDocument(t *testing.T) {
	t.Parallel()
	s := stacktest.NewSim(t, stacktest.SimOpts{})
	tok := s.Token("fulfilment")
	c := newClient(s, tok)
	label, err := c.CreateLabel(ctx(t), parcel(4201, 1))
	require.NoError(t, err)
	require.NotNil(t, label.Document)

	// What the carrier serves, fetched there (the simulator of this stack
	// wants no token; a real carrier's document URL needs the carrier's).
	_, atCarrier := fetchAtCarrier(t, label.Document)

	doc, err := c.LabelDocument(ctx(t), label.LabelID, "")
	require.NoError(t, err)
	require.Equal(t, atCarrier, doc.Data, "the carrier's bytes")
	require.Equal(t, label.Document.ContentType, doc.ContentType)
	require.Len(t, doc.Data, int(label.Document.SizeBytes))
	require.Contains(t, string(doc.Data), label.TrackingNo)
	require.Equal(t, sim.DocumentETag(atCarrier), doc.ETag, "the carrier's ETag passes through")
	require.False(t, doc.NotModified)

	again, err := c.LabelDocument(ctx(t), label.LabelID, doc.ETag)
	require.NoError(t, err)
	require.True(t, again.NotModified)
	require.Empty(t, again.Data)
	require.Equal(t, doc.ETag, again.ETag)

	// The headers as a plain HTTP caller sees them, HEAD and GET.
	path := "/v1/labels/" + label.LabelID + "/document"
	api := &stacktest.Stack{T: t, URL: s.URL}
	send := func(method, token string, headers ...string) (int, http.Header, []byte) {
		t.Helper()
		r := api.Do(method, path, token, nil, headers...)
		return r.Status, r.Header, r.Body
	}
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		status, h, body := send(method, tok)
		require.Equal(t, http.StatusOK, status, method)
		require.Equal(t, "application/pdf", h.Get("Content-Type"), method)
		require.Equal(t, strconv.FormatInt(label.Document.SizeBytes, 10), h.Get("Content-Length"), method)
		require.Equal(t, doc.ETag, h.Get("ETag"), method)
		if method == http.MethodHead {
			require.Empty(t, body)
		} else {
			require.Equal(t, atCarrier, body)
		}
	}
	for _, inm := range []string{doc.ETag, `"other", ` + doc.ETag, "W/" + doc.ETag, "*"} {
		status, h, body := send(http.MethodGet, tok, "If-None-Match", inm)
		require.Equal(t, http.StatusNotModified, status, inm)
		require.Equal(t, doc.ETag, h.Get("ETag"), inm)
		require.Empty(t, body, inm)
	}
	status, _, _ := send(http.MethodGet, tok, "If-None-Match", `"other"`)
	require.Equal(t, http.StatusOK, status)

	// Another caller's label is a label that does not exist.
	_, err = newClient(s, s.Token("billing")).LabelDocument(ctx(t), label.LabelID, "")
	other := requireNotFound(t, err)
	_, err = c.LabelDocument(ctx(t), "lbl_nope", "")
	unknown := requireNotFound(t, err)
	require.Equal(t, unknown.Problem, other.Problem, "the same 404")
	status, _, _ = send(http.MethodGet, "")
	require.Equal(t, http.StatusUnauthorized, status)

	// A label whose carrier named no document has none to fetch.
	noDoc, err := c.CreateLabel(ctx(t), parcel(4202, 1))
	require.NoError(t, err)
	_, err = s.Pool.Exec(ctx(t), `UPDATE labels SET document_url = NULL, document_content_type = NULL, document_size_bytes = NULL WHERE label_id = $1`, noDoc.LabelID)
	require.NoError(t, err)
	_, err = c.LabelDocument(ctx(t), noDoc.LabelID, "")
	requireNotFound(t, err)

	// The carrier down: 502 carrier_unavailable with Retry-After, which the
	// client retries within its bounds, then returns.
	s.StopCarrier()
	status, h, _ := send(http.MethodGet, tok)
	require.Equal(t, http.StatusBadGateway, status)
	require.Equal(t, "1", h.Get("Retry-After"))
	_, err = newClient(s, tok, client.WithMaxAttempts(2)).LabelDocument(ctx(t), label.LabelID, "")
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, http.StatusBadGateway, pe.Problem.Status)
	require.Equal(t, client.CodeCarrierUnavailable, pe.Problem.Code)
}
