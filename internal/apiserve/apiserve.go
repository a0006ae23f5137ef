// Package apiserve builds the HTTP API with everything it runs beside it
// (the LISTEN connection that wakes Prefer: wait, the NOTIFY flusher that
// wakes the relays): [New] is the one constructor, as worker.New is the
// worker's, used by cmd/api (through [Start], which makes its pool) and by
// the test stacks, so that what is tested is what is deployed.
package apiserve

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/api"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/postgres"
)

// Config configures an [API].
type Config struct {
	// Listen is the connection the listener takes; nil: no listener (through
	// a pooler without a direct URL), and Prefer: wait has only its sweep.
	Listen *pgx.ConnConfig
	// Channels are heard besides notify.ChannelFinal: a test stack's
	// in-process worker shares the listener (notify.ChannelIntents,
	// notify.ChannelWebhookEvents).
	Channels []string
	// Deps are the handler's (httpapi.NewServer); Deps.Pool is the API's
	// pool, and the API fills in Deps.Listener and Deps.Notifier.
	Deps httpapi.Deps
}

// API is the API's handler with its listener and its notifier.
type API struct {
	Handler  http.Handler
	Listener *notify.Listener // nil without Config.Listen
	Notifier *notify.Notifier
	// Schema answers /readyz for an API made by [Start]: a ping, and the
	// schema version read at start and after the database comes back.
	Schema *migrations.Gate

	deps   httpapi.Deps
	pool   *pgxpool.Pool // closed by Close: the pool Start made
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New starts the listener (on cfg.Listen) and the notifier (on
// cfg.Deps.Pool), and builds the handler over them. They outlive ctx's
// cancellation until [API.Close]: in-flight requests still wait for outcomes
// and notify while the server shuts down.
func New(ctx context.Context, cfg Config) *API {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a := &API{deps: cfg.Deps, cancel: cancel}
	log := cfg.Deps.Log
	if cfg.Listen != nil {
		a.Listener = notify.NewListener(cfg.Listen, log, slices.Concat([]string{notify.ChannelFinal}, cfg.Channels)...)
		a.wg.Go(func() { a.Listener.Run(lctx) })
	}
	a.Notifier = notify.NewNotifier(cfg.Deps.Pool, 0, log)
	a.wg.Go(func() { a.Notifier.Run(lctx) })
	a.deps.Listener, a.deps.Notifier = a.Listener, a.Notifier
	a.Handler = a.NewHandler()
	return a
}

// NewHandler returns a fresh handler over the API's pool, listener and
// notifier, as a restarted process builds one (nothing it caches survives).
func (a *API) NewHandler() http.Handler { return httpapi.NewServer(a.deps) }

// Metrics returns the registry the handler records into, as its /metrics
// (or, with MetricsElsewhere, the caller's listener) serves it.
func (a *API) Metrics() *metrics.Metrics { return a.deps.Metrics }

// Close stops the listener and the notifier, waits for them, and closes the
// pool [Start] made.
func (a *API) Close() {
	a.cancel()
	a.wg.Wait()
	if a.pool != nil {
		a.pool.Close()
	}
}

// Options are the API's settings besides the database.
type Options struct {
	KeyRetention time.Duration // KEY_RETENTION
	AcceptBatch  int           // accept.Opts.Batch: ACCEPT_BATCH, as cli.Batch returns it
	AcceptLinger time.Duration // accept.Opts.Linger: ACCEPT_LINGER, as cli.Linger returns it
	RateLimit    httpapi.RateLimit
	MaxWaiters   int // httpapi.Deps.MaxWaiters: 0 its default, negative none held (PREFER_WAIT_MAX=0)
	// Carrier and CarrierTimeout serve the label documents (CARRIER_URL,
	// CARRIER_TOKEN, CARRIER_TIMEOUT).
	Carrier        *carrier.Client
	CarrierTimeout time.Duration
	// MetricsElsewhere leaves /metrics off the handler: the caller serves
	// [API.Metrics] on its own listener (API_METRICS_ADDR).
	MetricsElsewhere bool
}

// Start makes a pool of at least 20 connections from db.Pool (connecting
// lazily: the API starts, and answers 503, while the database is away) and
// starts the API over it ([New]) as cmd/api serves it, with the listener on
// db.Listen (none through a pooler without a direct URL). Close also closes
// the pool.
func Start(ctx context.Context, db postgres.Endpoints, o Options, log zerolog.Logger) (*API, error) {
	poolCfg := db.Pool.Copy()
	poolCfg.MaxConns = max(poolCfg.MaxConns, 20)
	tracing.Pool(poolCfg)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, err
	}
	gate := migrations.NewGate(pool)
	m := metrics.New(metrics.API)
	m.Registry.MustRegister(metrics.NewPoolCollector(pool))
	a := New(ctx, Config{Listen: db.Listen(), Deps: httpapi.Deps{
		Ready:            gate.Ready,
		Opts:             accept.Opts{Pool: pool, KeyRetention: o.KeyRetention, Batch: o.AcceptBatch, Linger: o.AcceptLinger},
		Metrics:          m,
		MetricsElsewhere: o.MetricsElsewhere,
		Log:              log,
		OpenAPI:          api.OpenAPI,
		RateLimit:        o.RateLimit,
		MaxWaiters:       o.MaxWaiters,
		Carrier:          o.Carrier, CarrierTimeout: o.CarrierTimeout,
	}})
	a.pool, a.Schema = pool, gate
	return a, nil
}
