package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"
	"riverqueue.com/riverui"

	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/worker"
)

// adminPrefix is where the River UI is mounted on the admin listener.
const adminPrefix = "/riverui"

// validateAdmin checks the admin listener's configuration: it is off when
// ADMIN_ADDR is empty, and never served without credentials.
func validateAdmin(addr, user, password string) error {
	switch {
	case addr == "":
		return nil
	case user == "" || password == "":
		return fmt.Errorf("ADMIN_ADDR=%s needs ADMIN_USER and ADMIN_PASSWORD: the admin listener can retry and cancel jobs and is never served without basic auth", addr)
	case strings.Contains(user, ":"):
		return errors.New("ADMIN_USER: must not contain ':' (basic auth)")
	}
	return nil
}

// serveAdmin starts the admin listener on addr: the River UI under /riverui/,
// where an operator sees the jobs of the fleet and retries or cancels them,
// behind basic auth, and unauthenticated GET /healthz and /readyz (the
// database answers) for probes. It returns nil and no error when addr is empty
// (the listener is off by default). The UI's background work stops when ctx
// ends; the caller closes the server, whose Addr is the address listened on.
func serveAdmin(ctx context.Context, addr, user, password string, client *river.Client[pgx.Tx], pool *pgxpool.Pool, log zerolog.Logger) (*http.Server, error) {
	if err := validateAdmin(addr, user, password); err != nil {
		return nil, err
	}
	if addr == "" {
		return nil, nil
	}
	log = log.With().Str("component", "admin").Logger()
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    slog.New(worker.NewSlogHandler(log, slog.LevelDebug)),
		Prefix:    adminPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	if err := ui.Start(ctx); err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}

	mux := http.NewServeMux()
	mux.Handle(adminPrefix+"/", basicAuth(user, password, log, ui))
	// The Go profiles of this worker, behind the same credentials:
	// go tool pprof -seconds 10 http://USER:PASSWORD@ADMIN_ADDR/debug/pprof/profile
	prof := http.NewServeMux()
	prof.HandleFunc("/debug/pprof/", pprof.Index)
	prof.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
	prof.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	prof.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/pprof/", basicAuth(user, password, log, prof))
	mux.Handle("GET /{$}", http.RedirectHandler(adminPrefix+"/", http.StatusFound))
	// The UI is only as useful as the database behind it.
	handleHealth(mux, migrations.NewGate(pool))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	log.Info().Str("addr", ln.Addr().String()).Str("path", adminPrefix+"/").Msg("admin listening")
	srv := &http.Server{
		Addr:              ln.Addr().String(), // the port chosen for ":0", for the caller
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
	}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// basicAuth answers 401 unless the request carries user and password. Both
// are compared in constant time over their SHA-256, so that neither their
// content nor their length shows in the timing.
func basicAuth(user, password string, log zerolog.Logger, next http.Handler) http.Handler {
	wantUser, wantPassword := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotUser, gotPassword := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passwordOK := subtle.ConstantTimeCompare(gotPassword[:], wantPassword[:])
		if !ok || userOK&passwordOK != 1 {
			if ok {
				// Never the password; the user name helps tell a typo from a probe.
				log.Warn().Str("remote", r.RemoteAddr).Str("user", truncate(u, 64)).Msg("admin: wrong credentials")
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="labels admin", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
