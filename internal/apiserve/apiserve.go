// Package apiserve builds the HTTP API's handler with everything it runs
// beside it, as cmd/api serves it.
package apiserve

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/api"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/postgres"
)

// Options are the API's settings besides the database.
type Options struct {
	KeyRetention time.Duration // KEY_RETENTION
	AcceptBatch  int           // accept.Opts.Batch: ACCEPT_BATCH, as cli.Batch returns it
	RateLimit    httpapi.RateLimit
	MaxWaiters   int // httpapi.Deps.MaxWaiters: 0 its default, negative none held (PREFER_WAIT_MAX=0)
}

// Service is the API's handler with its pool, its LISTEN connection and its
// NOTIFY flusher.
type Service struct {
	Handler http.Handler
	pool    *pgxpool.Pool
	cancel  context.CancelFunc
}

// Start makes a pool of at least 20 connections from db.Pool (connecting
// lazily: the API starts, and answers 503, while the database is away),
// starts the listener (on db.Listen; none through a pooler without a direct
// URL, and Prefer: wait has only its sweep) and the notifier, and builds the handler.
// Close ends them.
func Start(ctx context.Context, db postgres.Endpoints, o Options, log zerolog.Logger) (*Service, error) {
	poolCfg := db.Pool.Copy()
	poolCfg.MaxConns = max(poolCfg.MaxConns, 20)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, err
	}
	// They outlive ctx's cancellation until Close: in-flight requests still
	// wait for outcomes and notify while the server shuts down.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var listener *notify.Listener
	if lc := db.Listen(); lc != nil {
		listener = notify.NewListener(lc, log, notify.ChannelFinal)
		go listener.Run(lctx)
	}
	notifier := notify.NewNotifier(pool, 0, log)
	go notifier.Run(lctx)
	handler := httpapi.NewServer(httpapi.Deps{
		Opts:       accept.Opts{Pool: pool, Notifier: notifier, KeyRetention: o.KeyRetention, Batch: o.AcceptBatch},
		Listener:   listener,
		Metrics:    metrics.New(metrics.API),
		Log:        log,
		OpenAPI:    api.OpenAPI,
		RateLimit:  o.RateLimit,
		MaxWaiters: o.MaxWaiters,
	})
	return &Service{Handler: handler, pool: pool, cancel: cancel}, nil
}

// Close stops the listener and the notifier and closes the pool.
func (s *Service) Close() {
	s.cancel()
	s.pool.Close()
}
