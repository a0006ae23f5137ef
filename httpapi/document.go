package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
)

// handleGetLabelDocument is GET (and HEAD) /v1/labels/{label_id}/document:
// the label's printable document, fetched from the carrier with the
// carrier's credentials and streamed to the caller, so that a caller can
// print its label with its own token alone. Only the label's caller gets
// it; anyone else gets the 404 of a label that does not exist. The
// carrier's Content-Type, Content-Length and ETag pass through, and the
// caller's If-None-Match is honoured (304). A carrier that fails, answers
// something unexpected or does not answer within CarrierTimeout is a 502
// carrier_unavailable with Retry-After: the document is still there to fetch
// later.
func (s *Server) handleGetLabelDocument(w http.ResponseWriter, r *http.Request, callerID string) {
	l, ok := s.callerLabel(w, r, callerID)
	if !ok {
		return
	}
	info := infoFrom(r)
	if l.Label.Document == nil {
		writeProblem(w, r, labels.CodeNotFound, "the carrier named no document for this label")
		return
	}
	if s.deps.Carrier == nil {
		carrierUnavailable(w, r, 0, "this API has no carrier to fetch documents from")
		return
	}
	cctx, ccancel := context.WithTimeout(r.Context(), s.deps.CarrierTimeout)
	defer ccancel()
	inm := r.Header.Get("If-None-Match")
	doc, err := s.deps.Carrier.Document(cctx, l.Label.CarrierLabelID, r.Method, inm)
	if err != nil {
		info.err = err
		var unknown *carrier.UnknownOutcomeError
		retryAfter := time.Duration(0)
		if errors.As(err, &unknown) {
			retryAfter = unknown.RetryAfter
		}
		detail := "the carrier did not serve the label's document; retry later"
		if _, ok := carrier.IsRejected(err); ok {
			detail = "the carrier has no document for this label"
		}
		carrierUnavailable(w, r, retryAfter, detail)
		return
	}
	defer doc.Body.Close()
	h := w.Header()
	if doc.ETag != "" {
		h.Set("ETag", doc.ETag)
	}
	h.Set("Cache-Control", "private")
	if doc.Status == http.StatusNotModified || (doc.ETag != "" && etagMatches(inm, doc.ETag)) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	contentType := doc.ContentType
	if contentType == "" {
		contentType = l.Label.Document.ContentType
	}
	h.Set("Content-Type", contentType)
	if doc.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(doc.ContentLength, 10))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, doc.Body); err != nil {
		// The status is sent: the caller sees a body shorter than its
		// Content-Length, or a reset. The log line says why.
		info.err = err
	}
}

// carrierUnavailable answers 502 carrier_unavailable with Retry-After: the
// carrier's, at least a second.
func carrierUnavailable(w http.ResponseWriter, r *http.Request, retryAfter time.Duration, detail string) {
	secs := max(int64((retryAfter+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	writeProblem(w, r, labels.CodeCarrierUnavailable, detail)
}

// etagMatches applies If-None-Match's weak comparison (RFC 9110 §13.1.2):
// "*" or a listed tag equal to etag, W/ prefixes aside.
func etagMatches(ifNoneMatch, etag string) bool {
	if ifNoneMatch == "" {
		return false
	}
	if strings.TrimSpace(ifNoneMatch) == "*" {
		return true
	}
	want := strings.TrimPrefix(etag, "W/")
	for _, t := range strings.Split(ifNoneMatch, ",") {
		if strings.TrimPrefix(strings.TrimSpace(t), "W/") == want {
			return true
		}
	}
	return false
}
