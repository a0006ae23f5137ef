package sim_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
)

// A purchase names its label document, the simulator serves it at that URL
// with the media type and size the answer gave, a replay names the same one,
// and the document is a well-formed PDF that says what was bought.
func TestLabelDocument(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{Token: "s3cret"})

	l := b.mustBuy(t, "k-doc", purchase(918273, "51147"))
	require.True(t, l.HasDocument(), "%+v", l)
	require.Equal(t, b.url+"/v1/labels/"+l.CarrierLabelID+"/document", l.LabelURL)
	require.Equal(t, "application/pdf", l.LabelContentType)

	resp, doc := send(t, http.MethodGet, l.LabelURL, "", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/pdf", resp.Header.Get("Content-Type"))
	require.Equal(t, strconv.FormatInt(*l.LabelSizeBytes, 10), resp.Header.Get("Content-Length"))
	require.Len(t, doc, int(*l.LabelSizeBytes))
	requireWellFormedPDF(t, []byte(doc))
	for _, want := range []string{"Tracking " + l.TrackingNo, "Label " + l.CarrierLabelID, "GROUND", "Order 918273 / parcel 1"} {
		require.Contains(t, doc, "("+want+") Tj", "the document prints %s", want)
	}

	again := b.mustBuy(t, "k-doc", purchase(918273, "51147"))
	require.True(t, again.Replayed)
	require.Equal(t, l.LabelURL, again.LabelURL)
	require.Equal(t, *l.LabelSizeBytes, *again.LabelSizeBytes)
	_, doc2 := send(t, http.MethodGet, l.LabelURL, "", "Authorization", "Bearer s3cret")
	require.Equal(t, doc, doc2, "the same label is the same bytes")

	// Behind the token, and only for labels sold.
	resp, _ = send(t, http.MethodGet, l.LabelURL, "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	status, body := b.do(t, http.MethodGet, "/v1/labels/CL-999/document", "", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusNotFound, status, body)
	require.Contains(t, body, `"code":"not_found"`)
}

// A label's document is built from the purchase alone: after a restart from
// the state file it is the same bytes, and a replay names the same size.
func TestLabelDocumentSurvivesARestart(t *testing.T) {
	t.Parallel()
	b, path := withStateFile(t)
	l := b.mustBuy(t, "k-doc", purchase(918273, "51147"))
	resp, doc := send(t, http.MethodGet, l.LabelURL, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, doc, int(*l.LabelSizeBytes))

	b2 := b.restart(t, path)
	again := b2.mustBuy(t, "k-doc", purchase(918273, "51147"))
	require.True(t, again.Replayed)
	require.Equal(t, *l.LabelSizeBytes, *again.LabelSizeBytes)
	resp, doc2 := send(t, http.MethodGet, again.LabelURL, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, doc, doc2)
}

// requireWellFormedPDF checks the structure a PDF reader relies on: the
// header, every object where the cross-reference table says it starts, and
// startxref pointing at that table.
func requireWellFormedPDF(t *testing.T, doc []byte) {
	t.Helper()
	require.True(t, bytes.HasPrefix(doc, []byte("%PDF-1.4\n")))
	require.True(t, bytes.HasSuffix(doc, []byte("%%EOF\n")))
	m := regexp.MustCompile(`startxref\n(\d+)\n`).FindSubmatch(doc)
	require.NotNil(t, m)
	xref, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(doc[xref:], []byte("xref\n0 6\n")), "startxref points at the table")
	entries := regexp.MustCompile(`(\d{10}) 00000 n `).FindAllSubmatch(doc[xref:], -1)
	require.Len(t, entries, 5)
	for i, e := range entries {
		off, err := strconv.Atoi(string(e[1]))
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(doc[off:], fmt.Appendf(nil, "%d 0 obj\n", i+1)), "object %d at offset %d", i+1, off)
	}
	length := regexp.MustCompile(`/Length (\d+) >>\nstream\n`).FindSubmatchIndex(doc)
	require.NotNil(t, length)
	n, _ := strconv.Atoi(string(doc[length[2]:length[3]]))
	require.True(t, bytes.HasPrefix(doc[length[1]+n:], []byte("endstream")), "the stream is /Length bytes long")
}

// carrier.Client.Document against the simulator: the document with its
// media type, size and ETag; 304 for its ETag; HEAD without the body; 404
// as a rejection; and a carrier in trouble as an unknown outcome with its
// Retry-After.
func TestClientDocument(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{Token: "s3cret"})
	l := b.mustBuy(t, "k-doc", purchase(918273, "51147"))
	c := carrier.NewClient(b.url, &carrier.ClientOpts{Token: "s3cret"})
	ctx := context.Background()

	got, err := c.Document(ctx, l.CarrierLabelID, http.MethodGet, "")
	require.NoError(t, err)
	doc, err := io.ReadAll(got.Body)
	require.NoError(t, got.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, sim.DocumentContentType, got.ContentType)
	require.Equal(t, *l.LabelSizeBytes, got.ContentLength)
	require.Len(t, doc, int(*l.LabelSizeBytes))
	require.Equal(t, sim.DocumentETag(doc), got.ETag)
	requireWellFormedPDF(t, doc)

	// The same tag again: 304, no body. Another tag, or a list without it: 200.
	same, err := c.Document(ctx, l.CarrierLabelID, http.MethodGet, got.ETag)
	require.NoError(t, err)
	rest, _ := io.ReadAll(same.Body)
	_ = same.Body.Close()
	require.Equal(t, http.StatusNotModified, same.Status)
	require.Equal(t, got.ETag, same.ETag)
	require.Empty(t, rest)
	other, err := c.Document(ctx, l.CarrierLabelID, http.MethodGet, `"stale", "older"`)
	require.NoError(t, err)
	_ = other.Body.Close()
	require.Equal(t, http.StatusOK, other.Status)

	head, err := c.Document(ctx, l.CarrierLabelID, http.MethodHead, "")
	require.NoError(t, err)
	rest, _ = io.ReadAll(head.Body)
	_ = head.Body.Close()
	require.Equal(t, http.StatusOK, head.Status)
	require.Equal(t, *l.LabelSizeBytes, head.ContentLength)
	require.Equal(t, got.ETag, head.ETag)
	require.Empty(t, rest)

	_, err = c.Document(ctx, "CL-999", http.MethodGet, "")
	rej, ok := carrier.IsRejected(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, http.StatusNotFound, rej.Status)
	require.Equal(t, "not_found", rej.Code)

	_, err = carrier.NewClient(b.url, nil).Document(ctx, l.CarrierLabelID, http.MethodGet, "")
	var unknown *carrier.UnknownOutcomeError
	require.ErrorAs(t, err, &unknown, "no token: the carrier's 401 is not the label's fault")
	require.Equal(t, http.StatusUnauthorized, unknown.Status)

	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer busy.Close()
	_, err = carrier.NewClient(busy.URL, nil).Document(ctx, l.CarrierLabelID, http.MethodGet, "")
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, http.StatusServiceUnavailable, unknown.Status)
	require.Equal(t, 7*time.Second, unknown.RetryAfter)
	busy.Close()
	_, err = carrier.NewClient(busy.URL, nil).Document(ctx, l.CarrierLabelID, http.MethodGet, "")
	require.ErrorAs(t, err, &unknown)
	require.Zero(t, unknown.Status, "no answer at all")
}
