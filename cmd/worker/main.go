// Command worker runs the outbox relay, the River workers that buy labels and
// the key sweeper. Many can run at once against one database (a fleet). See
// docs/operations.md for the configuration.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/reconcile"
	"github.com/labelkit/labels/webhook"
	"github.com/labelkit/labels/worker"
)

func main() { cli.Exit(run) }

// usage is built from the defaults, the ones cfg is read with.
var usage = fmt.Sprintf(`Usage: worker [flags]

Runs the outbox relay, the River workers that buy labels, and the key sweeper.

Flags (override the environment):
  --database-url URL     DATABASE_URL
  --carrier-url URL      CARRIER_URL
  --metrics-addr ADDR    METRICS_ADDR
  --admin-addr ADDR      ADMIN_ADDR
  --concurrency N        WORKER_CONCURRENCY

Environment (defaults): DATABASE_URL, DATABASE_DIRECT_URL (a direct
connection for LISTEN when DATABASE_URL is a pooler; without it the relay
and River poll), DATABASE_POOLED (true when DATABASE_DIRECT_URL is set), CARRIER_URL (%s),
CARRIER_TOKEN, CARRIER_TIMEOUT (%s), LEASE_DURATION (%s), WORKER_CONCURRENCY
(%d), RELAY_BACKLOG (0: %d x WORKER_CONCURRENCY purchases waiting in River;
-1: no bound), RELAY_LINGER (%s: the relay's wait after a notification, for
more intents in its transaction; 0 = none), MAX_ATTEMPTS (%d), RETRY_BASE (%s), RETRY_MAX (%s), KEY_RETENTION (%s),
SWEEP_INTERVAL (%s), SWEEP_BATCH (%d), TOMBSTONE_RETENTION (%s), WEBHOOK_EVENT_RETENTION
(%s), INTENT_RETENTION (%s: failed intents), RECONCILE_RETENTION (%s), LABEL_RETENTION
(0: labels are kept), METRICS_ADDR (%s),
WORKER_BATCH (%d: jobs per shared lease or completion statement; 0 = one
transaction per job), RECONCILE_SCHEDULE (off), ADMIN_ADDR (off; River UI at /riverui/, needs
ADMIN_USER and ADMIN_PASSWORD), LOG_LEVEL (%s), LOG_FORMAT (json|console).
Webhook delivery: WEBHOOK_TIMEOUT (%s), WEBHOOK_RETRY_BASE (%s), WEBHOOK_RETRY_MAX
(%s), WEBHOOK_MAX_ATTEMPTS (%d), WEBHOOK_DISABLE_AFTER (%d), WEBHOOK_CONCURRENCY (%d),
WEBHOOK_ENDPOINT_CONCURRENCY (%d: attempts in flight at one endpoint per process),
WEBHOOK_ALLOW_INSECURE (false), WEBHOOK_ALLOW_PRIVATE (false), WEBHOOK_SECRET_KEY
(unset; the api's, to open the secrets it sealed: without it no delivery is
signed), WEBHOOK_SECRET_KEY_OLD (unset; the previous key during a rotation),
WEBHOOK_ALLOW_UNSEALED (false; true: raw secrets are used, development only).
`, carrier.DefaultBaseURL, cli.Dur(worker.DefaultCarrierTimeout), cli.Dur(worker.DefaultLeaseDuration),
	worker.DefaultConcurrency, worker.RelayBacklogPerSlot, cli.Dur(worker.DefaultRelayLinger), worker.DefaultMaxAttempts, cli.Dur(worker.DefaultRetryBase),
	cli.Dur(worker.DefaultRetryMax), cli.Dur(idempotency.DefaultKeyRetention), cli.Dur(worker.DefaultSweepInterval),
	worker.DefaultSweepBatch, cli.Dur(worker.DefaultTombstoneRetention), cli.Dur(worker.DefaultWebhookEventRetention),
	cli.Dur(worker.DefaultIntentRetention), cli.Dur(worker.DefaultReconcileRetention), DefaultMetricsAddr, jobs.DefaultBatch,
	cli.DefaultLogLevel, cli.Dur(jobs.DefaultWebhookTimeout), cli.Dur(jobs.DefaultWebhookRetryBase),
	cli.Dur(jobs.DefaultWebhookRetryMax), jobs.DefaultWebhookMaxAttempts, jobs.DefaultWebhookDisableAfter,
	jobs.DefaultWebhookConcurrency, jobs.DefaultWebhookEndpointConcurrency)

// DefaultMetricsAddr is METRICS_ADDR's default: the metrics and health
// listener.
const DefaultMetricsAddr = "127.0.0.1:9091"

// Config is the worker's configuration, read once in run.
type Config struct {
	Database           cli.Database
	CarrierURL         string
	CarrierToken       string
	CarrierTimeout     time.Duration
	LeaseDuration      time.Duration
	Concurrency        int
	RelayBacklog       int           // RELAY_BACKLOG; 0: worker.RelayBacklogPerSlot × Concurrency, -1: no bound
	RelayLinger        time.Duration // RELAY_LINGER; 0: none
	Batch              int           // WORKER_BATCH
	MaxAttempts        int
	RetryBase          time.Duration
	RetryMax           time.Duration
	KeyRetention       time.Duration
	SweepInterval      time.Duration
	SweepBatch         int
	TombstoneRetention time.Duration
	// WebhookEventRetention, IntentRetention and ReconcileRetention are the
	// sweep's other retentions (worker.Config).
	WebhookEventRetention time.Duration
	IntentRetention       time.Duration
	ReconcileRetention    time.Duration
	LabelRetention        time.Duration // 0: kept
	MetricsAddr           string
	ReconcileSchedule     string
	AdminAddr             string
	AdminUser             string
	AdminPassword         string

	WebhookTimeout       time.Duration
	WebhookRetryBase     time.Duration
	WebhookRetryMax      time.Duration
	WebhookMaxAttempts   int
	WebhookDisableAfter  int
	WebhookConcurrency   int
	WebhookPerEndpoint   int // WEBHOOK_ENDPOINT_CONCURRENCY
	WebhookAllowInsecure bool
	WebhookAllowPrivate  bool
	WebhookSecretKeys    webhook.SecretKeys // WEBHOOK_SECRET_KEY, WEBHOOK_SECRET_KEY_OLD, WEBHOOK_ALLOW_UNSEALED; parsed by Validate
	webhookSecretKey     webhook.SecretKey
}

// Validate checks what parsing alone cannot. A carrier timeout at or above the
// lease would let a slow call outlive its lease, and two attempts would run at
// once: refused at start.
func (c *Config) Validate() error {
	switch {
	case c.CarrierTimeout <= 0:
		return fmt.Errorf("CARRIER_TIMEOUT=%s: must be positive", c.CarrierTimeout)
	case c.LeaseDuration <= 0:
		return fmt.Errorf("LEASE_DURATION=%s: must be positive", c.LeaseDuration)
	case c.CarrierTimeout >= c.LeaseDuration:
		return fmt.Errorf("CARRIER_TIMEOUT=%s must be below LEASE_DURATION=%s, or a slow carrier call outlives its lease", c.CarrierTimeout, c.LeaseDuration)
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return fmt.Errorf("WORKER_CONCURRENCY=%d: want 1 to 10000", c.Concurrency)
	case c.RelayBacklog < -1 || c.RelayBacklog > 1_000_000:
		return fmt.Errorf("RELAY_BACKLOG=%d: want -1 (no bound), 0 (%d x WORKER_CONCURRENCY) or up to 1000000", c.RelayBacklog, worker.RelayBacklogPerSlot)
	case c.RelayLinger < 0 || c.RelayLinger > time.Second:
		return fmt.Errorf("RELAY_LINGER=%s: want 0 (none) to 1s", c.RelayLinger)
	case c.Batch < 0 || c.Batch > 1000:
		return fmt.Errorf("WORKER_BATCH=%d: want 0 to 1000", c.Batch)
	case c.MaxAttempts < 1 || c.MaxAttempts > 1000:
		return fmt.Errorf("MAX_ATTEMPTS=%d: want 1 to 1000", c.MaxAttempts)
	case c.RetryBase <= 0 || c.RetryMax < c.RetryBase:
		return fmt.Errorf("RETRY_BASE=%s, RETRY_MAX=%s: want 0 < RETRY_BASE <= RETRY_MAX", c.RetryBase, c.RetryMax)
	case c.KeyRetention <= 0:
		return fmt.Errorf("KEY_RETENTION=%s: must be positive", c.KeyRetention)
	case c.SweepInterval <= 0:
		return fmt.Errorf("SWEEP_INTERVAL=%s: must be positive", c.SweepInterval)
	case c.SweepBatch < 1:
		return fmt.Errorf("SWEEP_BATCH=%d: must be positive", c.SweepBatch)
	case c.TombstoneRetention < c.KeyRetention:
		return fmt.Errorf("TOMBSTONE_RETENTION=%s: must be at least KEY_RETENTION=%s", c.TombstoneRetention, c.KeyRetention)
	case c.WebhookEventRetention <= 0:
		return fmt.Errorf("WEBHOOK_EVENT_RETENTION=%s: must be positive", c.WebhookEventRetention)
	case c.IntentRetention < c.KeyRetention:
		return fmt.Errorf("INTENT_RETENTION=%s: must be at least KEY_RETENTION=%s", c.IntentRetention, c.KeyRetention)
	case c.ReconcileRetention <= 0:
		return fmt.Errorf("RECONCILE_RETENTION=%s: must be positive", c.ReconcileRetention)
	case c.LabelRetention != 0 && (c.LabelRetention < c.IntentRetention || c.LabelRetention < c.ReconcileRetention+reconcile.LineRetentionMargin):
		return fmt.Errorf("LABEL_RETENTION=%s: want 0 (kept) or at least INTENT_RETENTION=%s and RECONCILE_RETENTION=%s + %s",
			c.LabelRetention, c.IntentRetention, c.ReconcileRetention, reconcile.LineRetentionMargin)
	case c.WebhookTimeout <= 0 || c.WebhookTimeout > 5*time.Minute:
		return fmt.Errorf("WEBHOOK_TIMEOUT=%s: want above 0 and at most 5m", c.WebhookTimeout)
	case c.WebhookRetryBase <= 0 || c.WebhookRetryMax < c.WebhookRetryBase:
		return fmt.Errorf("WEBHOOK_RETRY_BASE=%s, WEBHOOK_RETRY_MAX=%s: want 0 < WEBHOOK_RETRY_BASE <= WEBHOOK_RETRY_MAX", c.WebhookRetryBase, c.WebhookRetryMax)
	case c.WebhookMaxAttempts < 1 || c.WebhookMaxAttempts > 100:
		return fmt.Errorf("WEBHOOK_MAX_ATTEMPTS=%d: want 1 to 100", c.WebhookMaxAttempts)
	case c.WebhookDisableAfter < 1:
		return fmt.Errorf("WEBHOOK_DISABLE_AFTER=%d: must be positive", c.WebhookDisableAfter)
	case c.WebhookConcurrency < 1 || c.WebhookConcurrency > 1000:
		return fmt.Errorf("WEBHOOK_CONCURRENCY=%d: want 1 to 1000", c.WebhookConcurrency)
	case c.WebhookPerEndpoint < 1 || c.WebhookPerEndpoint > 1000:
		return fmt.Errorf("WEBHOOK_ENDPOINT_CONCURRENCY=%d: want 1 to 1000", c.WebhookPerEndpoint)
	}
	k, err := c.WebhookSecretKeys.Parse()
	if err != nil {
		return err
	}
	c.webhookSecretKey = k
	return validateAdmin(c.AdminAddr, c.AdminUser, c.AdminPassword)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if cli.PrintVersion("worker", args, stdout) {
		return 0
	}
	env := cli.NewEnv(ctx, getenv)
	cfg := Config{
		Database:              env.Database(),
		CarrierURL:            env.String("CARRIER_URL", carrier.DefaultBaseURL),
		CarrierToken:          env.String("CARRIER_TOKEN", ""),
		CarrierTimeout:        env.Duration("CARRIER_TIMEOUT", worker.DefaultCarrierTimeout),
		LeaseDuration:         env.Duration("LEASE_DURATION", worker.DefaultLeaseDuration),
		Concurrency:           env.Int("WORKER_CONCURRENCY", worker.DefaultConcurrency),
		RelayBacklog:          env.Int("RELAY_BACKLOG", 0),
		RelayLinger:           env.Duration("RELAY_LINGER", worker.DefaultRelayLinger),
		Batch:                 env.Int("WORKER_BATCH", jobs.DefaultBatch),
		MaxAttempts:           env.Int("MAX_ATTEMPTS", worker.DefaultMaxAttempts),
		RetryBase:             env.Duration("RETRY_BASE", worker.DefaultRetryBase),
		RetryMax:              env.Duration("RETRY_MAX", worker.DefaultRetryMax),
		KeyRetention:          env.Duration("KEY_RETENTION", idempotency.DefaultKeyRetention),
		SweepInterval:         env.Duration("SWEEP_INTERVAL", worker.DefaultSweepInterval),
		SweepBatch:            env.Int("SWEEP_BATCH", worker.DefaultSweepBatch),
		TombstoneRetention:    env.Duration("TOMBSTONE_RETENTION", worker.DefaultTombstoneRetention),
		WebhookEventRetention: env.Duration("WEBHOOK_EVENT_RETENTION", worker.DefaultWebhookEventRetention),
		IntentRetention:       env.Duration("INTENT_RETENTION", worker.DefaultIntentRetention),
		ReconcileRetention:    env.Duration("RECONCILE_RETENTION", worker.DefaultReconcileRetention),
		LabelRetention:        env.Duration("LABEL_RETENTION", 0),
		MetricsAddr:           env.String("METRICS_ADDR", DefaultMetricsAddr),
		ReconcileSchedule:     env.String("RECONCILE_SCHEDULE", ""),
		AdminAddr:             env.String("ADMIN_ADDR", ""),
		AdminUser:             env.String("ADMIN_USER", ""),
		AdminPassword:         env.String("ADMIN_PASSWORD", ""),

		WebhookTimeout:       env.Duration("WEBHOOK_TIMEOUT", jobs.DefaultWebhookTimeout),
		WebhookRetryBase:     env.Duration("WEBHOOK_RETRY_BASE", jobs.DefaultWebhookRetryBase),
		WebhookRetryMax:      env.Duration("WEBHOOK_RETRY_MAX", jobs.DefaultWebhookRetryMax),
		WebhookMaxAttempts:   env.Int("WEBHOOK_MAX_ATTEMPTS", jobs.DefaultWebhookMaxAttempts),
		WebhookDisableAfter:  env.Int("WEBHOOK_DISABLE_AFTER", jobs.DefaultWebhookDisableAfter),
		WebhookConcurrency:   env.Int("WEBHOOK_CONCURRENCY", jobs.DefaultWebhookConcurrency),
		WebhookPerEndpoint:   env.Int("WEBHOOK_ENDPOINT_CONCURRENCY", jobs.DefaultWebhookEndpointConcurrency),
		WebhookAllowInsecure: env.Bool("WEBHOOK_ALLOW_INSECURE", false),
		WebhookAllowPrivate:  env.Bool("WEBHOOK_ALLOW_PRIVATE", false),
		WebhookSecretKeys:    webhook.SecretKeysFromEnv(env),
	}
	log := cli.Logger(env, stderr, "worker")
	otel := cli.TracingEnv(env)

	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&cfg.Database.URL, "database-url", cfg.Database.URL, "")
	fs.StringVar(&cfg.CarrierURL, "carrier-url", cfg.CarrierURL, "")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", cfg.MetricsAddr, "")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, "")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "")
	if code, ok := cli.Parse(fs, args[1:], usage, stdout, stderr); !ok {
		return code
	}
	db, ok := cli.Endpoints("worker", env, cfg.Validate, cfg.Database, stderr)
	if !ok {
		return 2
	}
	var periodic []*river.PeriodicJob
	if cfg.ReconcileSchedule != "" {
		pj, err := reconcilePeriodicJob(cfg.ReconcileSchedule)
		if err != nil {
			fmt.Fprintf(stderr, "worker: RECONCILE_SCHEDULE=%q: %v\n", cfg.ReconcileSchedule, err)
			return 2
		}
		periodic = append(periodic, pj)
	}

	stopTracing, ok := cli.Tracing(ctx, "worker", otel, log, stderr)
	if !ok {
		return 2
	}
	defer stopTracing()
	ctx, cancel := cli.ServiceContext(ctx, log)
	defer cancel()
	return work(ctx, cfg, db, periodic, log)
}

func work(ctx context.Context, cfg Config, db postgres.Endpoints, periodic []*river.PeriodicJob, log zerolog.Logger) int {
	poolCfg := db.Pool
	poolCfg.MaxConns = max(poolCfg.MaxConns, int32(min(cfg.Concurrency+10, 60)))
	tracing.Pool(poolCfg)
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), poolCfg)
	if err != nil {
		log.Error().Err(err).Msg("database pool")
		return 1
	}
	defer pool.Close()
	m := metrics.New(metrics.Worker)

	// Intents wake the relay; completions that wrote a webhook event wake
	// the webhook event relay.
	// LISTEN needs a session of its own: through a pooler it goes to the
	// direct connection, and without one the relay and River poll.
	var listener *notify.Listener
	var riverListen *pgxpool.Pool
	if lc := db.Listen(); lc != nil {
		listener = notify.NewListener(lc, log, notify.ChannelIntents, notify.ChannelWebhookEvents)
	}
	if db.Pooled && db.Direct != nil {
		lcfg := db.Direct.Copy()
		lcfg.MaxConns = 2
		if riverListen, err = pgxpool.NewWithConfig(context.WithoutCancel(ctx), lcfg); err != nil {
			log.Error().Err(err).Msg("direct database pool")
			return 1
		}
		defer riverListen.Close()
	}
	w, err := worker.New(worker.Config{
		Pool:                  pool,
		Carrier:               carrier.NewClient(cfg.CarrierURL, &carrier.ClientOpts{Token: cfg.CarrierToken, InFlight: cfg.Concurrency}),
		CarrierTimeout:        cfg.CarrierTimeout,
		LeaseDuration:         cfg.LeaseDuration,
		KeyRetention:          cfg.KeyRetention,
		Concurrency:           cfg.Concurrency,
		RelayBacklog:          cfg.RelayBacklog,
		RelayLinger:           cli.Linger(cfg.RelayLinger),
		Batch:                 cli.Batch(cfg.Batch),
		MaxAttempts:           cfg.MaxAttempts,
		RetryBase:             cfg.RetryBase,
		RetryMax:              cfg.RetryMax,
		SweepInterval:         cfg.SweepInterval,
		SweepBatch:            cfg.SweepBatch,
		TombstoneRetention:    cfg.TombstoneRetention,
		WebhookEventRetention: cfg.WebhookEventRetention,
		IntentRetention:       cfg.IntentRetention,
		ReconcileRetention:    cfg.ReconcileRetention,
		LabelRetention:        cfg.LabelRetention,
		Metrics:               m,
		Log:                   log,
		Listener:              listener,
		RiverListen:           riverListen,
		PollOnly:              db.Pooled && db.Direct == nil,
		PeriodicJobs:          periodic,
		Webhooks: jobs.WebhookConfig{
			Timeout:             cfg.WebhookTimeout,
			RetryBase:           cfg.WebhookRetryBase,
			RetryMax:            cfg.WebhookRetryMax,
			MaxAttempts:         cfg.WebhookMaxAttempts,
			DisableAfter:        cfg.WebhookDisableAfter,
			EndpointConcurrency: cfg.WebhookPerEndpoint,
			Policy:              webhook.Policy{AllowInsecure: cfg.WebhookAllowInsecure, AllowPrivate: cfg.WebhookAllowPrivate},
			SecretKey:           cfg.webhookSecretKey,
			Metrics:             metrics.NewWebhooks(m.Registry),
		},
		WebhookConcurrency: cfg.WebhookConcurrency,
		AddWorkersFunc: func(workers *river.Workers) error {
			return addReconcileWorker(workers, pool, cfg, m, log)
		},
	})
	if err != nil {
		log.Error().Err(err).Msg("river client")
		return 1
	}
	client := w.River

	// The listener runs until the first signal; River is stopped after the
	// relay, gracefully, so that every started carrier call is recorded.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var wg sync.WaitGroup
	if listener != nil {
		wg.Go(func() { listener.Run(bg) })
	}

	schema := migrations.NewGate(pool)
	metricsSrv, err := serveMetrics(cfg.MetricsAddr, pool, schema, m, log)
	if err != nil {
		log.Error().Err(err).Str("addr", cfg.MetricsAddr).Msg("metrics listener")
		return 1
	}
	defer metricsSrv.Close()
	adminSrv, err := serveAdmin(bg, cfg.AdminAddr, cfg.AdminUser, cfg.AdminPassword, client, pool, log)
	if err != nil {
		log.Error().Err(err).Str("addr", cfg.AdminAddr).Msg("admin listener")
		return 1
	}
	if adminSrv != nil {
		defer adminSrv.Close()
	}

	// River retries its own start while the database is away; a schema
	// behind this binary stops the worker at once.
	for {
		cctx, ccancel := context.WithTimeout(bg, 10*time.Second)
		err := schema.Check(cctx)
		ccancel()
		if migrations.IsBehind(err) {
			log.Error().Msg("refusing to start: " + err.Error())
			stopBG()
			wg.Wait()
			return 1
		}
		if err == nil {
			err = w.Start(bg)
		}
		if err == nil {
			break
		}
		log.Warn().Err(err).Msg("river could not start; retrying")
		select {
		case <-ctx.Done():
			stopBG()
			wg.Wait()
			return 0
		case <-time.After(2 * time.Second):
		}
	}
	log.Info().Int("concurrency", cfg.Concurrency).Dur("lease_ms", cfg.LeaseDuration).Dur("carrier_timeout_ms", cfg.CarrierTimeout).Msg("worker started")
	if err := cfg.webhookSecretKey.CanStore(); err != nil {
		log.Warn().Err(err).Msg("no webhook delivery can be signed until WEBHOOK_SECRET_KEY is set")
	}

	<-ctx.Done()
	log.Info().Msg("shutting down: no new jobs; waiting for carrier calls in flight")
	// Stop waits for running jobs. Their carrier calls are detached from
	// cancellation and bounded by CARRIER_TIMEOUT, and their outcome is saved.
	err = w.Stop(context.Background())
	stopBG()
	wg.Wait()
	if err != nil {
		log.Error().Err(err).Msg("river stop")
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}

func serveMetrics(addr string, pool *pgxpool.Pool, schema *migrations.Gate, m *metrics.Metrics, log zerolog.Logger) (*http.Server, error) {
	m.Registry.MustRegister(metrics.NewStoreCollector(pool), metrics.NewPoolCollector(pool), metrics.NewWebhookCollector(func(ctx context.Context) (metrics.WebhookGauges, error) {
		st, err := postgres.GetWebhookStats(ctx, pool)
		return metrics.WebhookGauges{OldestUndelivered: st.OldestUndelivered, Disabled: st.Disabled}, err
	}))
	return m.Serve(addr, func(mux *http.ServeMux) { handleHealth(mux, schema) }, log)
}

// handleHealth adds /healthz (the process runs) and /readyz (the database
// answers and its schema is current) to mux.
func handleHealth(mux *http.ServeMux, schema *migrations.Gate) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		if err := schema.Ready(ctx); err != nil {
			status := "database unavailable"
			if migrations.IsBehind(err) {
				status = err.Error()
			}
			body, _ := json.Marshal(map[string]string{"status": status})
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(body)
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	})
}
