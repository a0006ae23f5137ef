// Package otlptest is a real OTLP/HTTP trace receiver for tests: an
// httptest server that decodes each export request (protobuf, as the
// exporters send it) and keeps its spans.
package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one span received, with its resource's service.name.
type Span struct {
	Service      string
	Name         string
	TraceID      string // hex
	SpanID       string // hex
	ParentSpanID string // hex; "" for a root
	LinkTraceIDs []string
}

// Receiver is the receiver; its URL is OTEL_EXPORTER_OTLP_ENDPOINT.
type Receiver struct {
	URL string

	mu       sync.Mutex
	spans    []Span
	requests int
}

// New starts a receiver, closed when the test ends.
func New(t testing.TB) *Receiver {
	t.Helper()
	rc := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	return rc
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a POST of protobuf to /v1/traces", http.StatusBadRequest)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{Service: service, Name: sp.GetName(), TraceID: hex.EncodeToString(sp.GetTraceId()),
					SpanID: hex.EncodeToString(sp.GetSpanId()), ParentSpanID: hex.EncodeToString(sp.GetParentSpanId())}
				for _, l := range sp.GetLinks() {
					s.LinkTraceIDs = append(s.LinkTraceIDs, hex.EncodeToString(l.GetTraceId()))
				}
				got = append(got, s)
			}
		}
	}
	rc.mu.Lock()
	rc.spans = append(rc.spans, got...)
	rc.requests++
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far, in order.
func (rc *Receiver) Spans() []Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Span(nil), rc.spans...)
}

// Named returns the spans received with name.
func (rc *Receiver) Named(name string) []Span {
	var out []Span
	for _, s := range rc.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
