package httpapi

import (
	"net/http"
	"path"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/labelkit/labels"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/labels", s.observe("create_label", s.authenticate(s.limit(s.handleCreateLabel))))
	mux.Handle("GET /v1/label-requests/{id}", s.observe("get_label_request", s.authenticate(s.handleGetLabelRequest)))
	mux.Handle("GET /v1/label-requests", s.observe("find_label_request", s.authenticate(s.handleFindLabelRequest)))
	mux.Handle("GET /v1/labels/{label_id}", s.observe("get_label", s.authenticate(s.handleGetLabel)))
	mux.Handle("GET /v1/labels/{label_id}/document", s.observe("get_label_document", s.authenticate(s.handleGetLabelDocument)))

	mux.Handle("GET /healthz", s.observe("ops", handleHealthz))
	mux.Handle("GET /readyz", s.observe("ops", s.handleReadyz))
	if !s.deps.MetricsElsewhere {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.deps.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	if s.deps.OpenAPI != nil {
		mux.Handle("GET /openapi.yaml", s.observe("ops", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write(s.deps.OpenAPI)
		}))
	}
	mux.Handle("/", s.observe("unknown", s.handleUnknown))
	unknown := s.observe("unknown", s.handleUnknown)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ServeMux would answer a path with dot segments or doubled slashes
		// with a redirect to its clean form; a path that is not clean names
		// nothing here.
		if p := r.URL.Path; p == "" || p[0] != '/' || path.Clean(p) != p {
			unknown(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// handleUnknown answers every other request with a problem: 405 with Allow for
// a known path and another method, 404 otherwise.
func (s *Server) handleUnknown(w http.ResponseWriter, r *http.Request) {
	allow := ""
	switch p := r.URL.Path; {
	case p == "/v1/labels":
		allow = "POST"
	case p == "/v1/label-requests" || len(p) > len("/v1/label-requests/") && p[:len("/v1/label-requests/")] == "/v1/label-requests/",
		len(p) > len("/v1/labels/") && p[:len("/v1/labels/")] == "/v1/labels/",
		p == "/healthz", p == "/readyz", p == "/metrics" && !s.deps.MetricsElsewhere:
		allow = "GET, HEAD"
	}
	if allow != "" {
		w.Header().Set("Allow", allow)
		writeProblem(w, r, labels.CodeMethodNotAllowed, "method "+r.Method+" is not allowed here")
		return
	}
	writeProblem(w, r, labels.CodeNotFound, "no such resource")
}
