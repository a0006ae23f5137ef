// Command apiprof serves the label service's HTTP API as cmd/api serves it
// (internal/apiserve: the handler with its pool, LISTEN connection and NOTIFY
// flusher, behind httpapi.NewHTTPServer's limits) and, on a second loopback listener,
// net/http/pprof. tools/bench starts it for its profile phase, so that the
// API's CPU profile is taken in a process of its own, as in production, and
// not in the load generator's runtime. It is a benchmark tool, never deployed.
//
// Environment: DATABASE_URL, API_ADDR (default 127.0.0.1:0), PPROF_ADDR
// (default 127.0.0.1:0), KEY_RETENTION, ACCEPT_BATCH, LOG_LEVEL, LOG_FORMAT,
// and Go's own GOGC, which tools/bench sets as the deploy manifests set it
// for cmd/api. It logs "listening" and "pprof listening" with their
// addresses.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/apiserve"
	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/postgres"
)

func main() {
	os.Exit(run(context.Background(), os.Getenv, os.Stderr))
}

func run(ctx context.Context, getenv func(string) string, stderr io.Writer) int {
	env := &cli.Env{Getenv: getenv}
	dbURL := env.DatabaseURL()
	addr := env.String("API_ADDR", "127.0.0.1:0")
	pprofAddr := env.String("PPROF_ADDR", "127.0.0.1:0")
	retention := env.Duration("KEY_RETENTION", 24*time.Hour)
	acceptBatch := cli.Batch(env.Int("ACCEPT_BATCH", 64))
	log := cli.Logger(env, stderr, "api")
	if env.Err != nil {
		fmt.Fprintf(stderr, "apiprof: %v\n", env.Err)
		return 2
	}
	for _, a := range []string{addr, pprofAddr} {
		if !strings.HasPrefix(a, "127.") && !strings.HasPrefix(a, "localhost:") && !strings.HasPrefix(a, "[::1]:") {
			fmt.Fprintf(stderr, "apiprof: %s: loopback addresses only\n", a)
			return 2
		}
	}
	poolCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		fmt.Fprintf(stderr, "apiprof: DATABASE_URL: %v\n", err)
		return 2
	}
	ctx, cancel := cli.SignalContext(ctx, func() { os.Exit(1) })
	defer cancel()

	// What cmd/api's serve does.
	svc, err := apiserve.Start(ctx, postgres.Endpoints{Pool: poolCfg}, apiserve.Options{KeyRetention: retention, AcceptBatch: acceptBatch}, log)
	if err != nil {
		log.Error().Err(err).Msg("database pool")
		return 1
	}
	defer svc.Close()
	srv := httpapi.NewHTTPServer(svc.Handler, httpapi.Limits{})

	// The profiling listener (cmd/worker serves the same on ADMIN_ADDR).
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	psrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error().Err(err).Msg("listen")
		return 1
	}
	pln, err := net.Listen("tcp", pprofAddr)
	if err != nil {
		log.Error().Err(err).Msg("listen pprof")
		return 1
	}
	log.Info().Str("addr", ln.Addr().String()).Msg("listening")
	log.Info().Str("addr", pln.Addr().String()).Msg("pprof listening")
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- psrv.Serve(pln) }()
	select {
	case err := <-errc:
		log.Error().Err(err).Msg("serve")
		return 1
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer scancel()
	err = errors.Join(srv.Shutdown(sctx), psrv.Shutdown(sctx))
	if err != nil {
		log.Error().Err(err).Msg("shutdown")
		return 1
	}
	return 0
}
