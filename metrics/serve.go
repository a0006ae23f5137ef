package metrics

import (
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Serve serves GET /metrics of m's registry on addr in the background, with
// the routes more adds (nil: none), and logs "metrics listening" with the
// address taken (addr may end in :0): the worker's METRICS_ADDR listener and
// the API's API_METRICS_ADDR one. Close the returned server to stop it.
func (m *Metrics) Serve(addr string, more func(*http.ServeMux), log zerolog.Logger) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	if more != nil {
		more(mux)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	log.Info().Str("addr", ln.Addr().String()).Msg("metrics listening")
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
