package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels/carrier"
)

// DocumentContentType is the media type of the label documents the simulator
// serves: a one-page PDF, 4 by 6 inches, as a thermal label printer takes it.
const DocumentContentType = "application/pdf"

// documentPath is where a label's document is served, under the base URL.
func documentPath(carrierLabelID string) string {
	return "/v1/labels/" + carrierLabelID + "/document"
}

// label renders the purchase as the protocol's answer. base is the URL the
// client reached the simulator at ("http://host:port"); it names the label
// document, and an empty base leaves the document out (the void answer). A
// voided label says so: "status": "voided" and "voided_at" (a live one has
// no status), so that a replay of its key is never taken for a live label.
func (p Purchase) label(base string) carrier.Label {
	l := carrier.Label{
		CarrierLabelID: p.CarrierLabelID,
		TrackingNo:     p.TrackingNo,
		CostCents:      p.CostCents,
		Currency:       p.Currency,
		PurchasedAt:    p.PurchasedAt,
	}
	if p.VoidedAt != nil {
		at := *p.VoidedAt
		l.Status, l.VoidedAt = carrier.StatusVoided, &at
	}
	if base != "" {
		size := int64(len(p.document()))
		l.LabelURL = base + documentPath(p.CarrierLabelID)
		l.LabelContentType = DocumentContentType
		l.LabelSizeBytes = &size
	}
	return l
}

// baseURL is the simulator's URL as the client of r reached it.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// handleDocument is GET (and HEAD) /v1/labels/{carrier_label_id}/document:
// the label's PDF, the same bytes and ETag every time (voided labels
// included: a carrier keeps what it sold); 304 when If-None-Match names it.
func (s *Server) handleDocument(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("carrier_label_id")
	s.mu.Lock()
	i, ok := s.byLabel[id]
	var p Purchase
	if ok {
		p = s.purchases[i]
	}
	s.mu.Unlock()
	if !ok {
		writeProblem(w, http.StatusNotFound, "not_found", "no label "+id)
		return
	}
	doc := p.document()
	w.Header().Set("Content-Type", DocumentContentType)
	w.Header().Set("Content-Disposition", `inline; filename="`+p.CarrierLabelID+`.pdf"`)
	w.Header().Set("ETag", DocumentETag(doc))
	// ServeContent answers If-None-Match with 304 and HEAD without the body,
	// and sets Content-Length.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(doc))
}

// DocumentETag is the strong ETag the simulator serves a document under: a
// digest of its bytes, so the same label has the same tag, across restarts
// too.
func DocumentETag(doc []byte) string {
	sum := sha256.Sum256(doc)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// document renders the label as a minimal PDF 1.4 file: one 288 x 432 point
// page (4 x 6 in) of Helvetica text. It is built from the purchase alone, so
// the same label is the same bytes, also after a restart from the state file.
// The address is not kept by the simulator, so it is not printed.
func (p Purchase) document() []byte {
	// Built with appends, not fmt: every purchase answer renders it for its size.
	lines := [...]string{
		"LABELKIT CARRIER SIMULATOR",
		"",
		strings.ToUpper(p.Service),
		"Tracking " + p.TrackingNo,
		"Label " + p.CarrierLabelID,
		"Order " + strconv.FormatInt(p.OrderID, 10) + " / parcel " + strconv.Itoa(p.ParcelNo),
		"Weight " + strconv.Itoa(p.WeightG) + " g",
		"Reference " + p.Reference,
		"Purchased " + p.PurchasedAt.UTC().Format(time.RFC3339),
	}
	stream := make([]byte, 0, 512)
	stream = append(stream, "BT /F1 14 Tf 18 400 Td 16 TL\n"...)
	for _, l := range lines {
		stream = append(stream, '(')
		stream = appendPDFEscaped(stream, l)
		stream = append(stream, ") Tj T*\n"...)
	}
	stream = append(stream, "ET\n"...)

	objects := [...]string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 288 432] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		"<< /Length " + strconv.Itoa(len(stream)) + " >>\nstream\n" + string(stream) + "endstream",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
	}
	b := make([]byte, 0, 1536)
	b = append(b, "%PDF-1.4\n"...)
	var offsets [len(objects)]int
	for i, o := range objects {
		offsets[i] = len(b)
		b = strconv.AppendInt(b, int64(i+1), 10)
		b = append(b, " 0 obj\n"...)
		b = append(b, o...)
		b = append(b, "\nendobj\n"...)
	}
	xref := len(b)
	b = append(b, "xref\n0 "...)
	b = strconv.AppendInt(b, int64(len(objects)+1), 10)
	b = append(b, "\n0000000000 65535 f \n"...)
	for _, off := range offsets {
		d := strconv.Itoa(off)
		for range 10 - len(d) {
			b = append(b, '0')
		}
		b = append(b, d...)
		b = append(b, " 00000 n \n"...)
	}
	b = append(b, "trailer\n<< /Size "...)
	b = strconv.AppendInt(b, int64(len(objects)+1), 10)
	b = append(b, " /Root 1 0 R >>\nstartxref\n"...)
	b = strconv.AppendInt(b, int64(xref), 10)
	return append(b, "\n%%EOF\n"...)
}

// appendPDFEscaped appends s as a PDF literal string's content: printable
// ASCII, with the delimiters escaped.
func appendPDFEscaped(b []byte, s string) []byte {
	for _, r := range s {
		switch {
		case r == '(' || r == ')' || r == '\\':
			b = append(b, '\\', byte(r))
		case r >= 0x20 && r < 0x7f:
			b = append(b, byte(r))
		default:
			b = append(b, '?')
		}
	}
	return b
}
