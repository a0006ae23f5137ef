// Command api serves the label service's HTTP API, applies the migrations
// (api migrate), manages callers (api caller add NAME) and their webhook
// endpoints (api webhook set|rotate|delete|list|reseal). See
// docs/operations.md for the configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/apiserve"
	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/webhook"
)

func main() { cli.Exit(run) }

// usage is built from the defaults, the ones cfg is read with.
var usage = fmt.Sprintf(`Usage:
  api                     serve the HTTP API
  api migrate             apply every migration (ours and River's); safe to repeat
  api caller add NAME     create caller NAME if new, add a token, print it last
  api webhook set CALLER URL
                          set CALLER's webhook endpoint (active again); a new
                          signing secret, when it has none, is printed last
  api webhook rotate CALLER
                          add a new signing secret, printed last; the old ones
                          sign too for WEBHOOK_ROTATION_OVERLAP
  api webhook delete CALLER
                          stop deliveries; undelivered events are dropped
  api webhook list        caller, URL, state, failures in a row, why disabled
                          (tab-separated, after a header row)
  api webhook reseal [--batch N]
                          seal every stored signing secret with
                          WEBHOOK_SECRET_KEY (those raw or sealed with
                          WEBHOOK_SECRET_KEY_OLD); safe to repeat

Flags (override the environment):
  --addr ADDR             listen address (API_ADDR, default %s)
  --database-url URL      PostgreSQL (DATABASE_URL)

Environment: DATABASE_URL, DATABASE_DIRECT_URL (a direct connection when
DATABASE_URL is a pooler: LISTEN and migrations), DATABASE_POOLED (default:
true when DATABASE_DIRECT_URL is set), API_ADDR, API_METRICS_ADDR (unset:
/metrics on API_ADDR; set: /metrics only on this listener), KEY_RETENTION (%s), ACCEPT_BATCH (%d:
accepts per shared transaction; 0 = one transaction per accept), ACCEPT_LINGER
(%s: the longest a shared transaction waits for more accepts after one of
few; 0 = never),
RATE_LIMIT (%d: off; creates a second per caller in this process, past which
429 rate_limited), RATE_LIMIT_BURST (0: RATE_LIMIT), PREFER_WAIT_MAX (%d:
Prefer: wait requests held at once; past it answered at once), CARRIER_URL
(%s), CARRIER_TOKEN, CARRIER_TIMEOUT (%s: one fetch of a label document,
GET /v1/labels/{label_id}/document), LOG_LEVEL (%s), LOG_FORMAT
(json|console); for api webhook: WEBHOOK_ALLOW_INSECURE
(false: https:// only), WEBHOOK_ALLOW_PRIVATE (false: public hosts only),
WEBHOOK_ROTATION_OVERLAP (%s), WEBHOOK_SECRET_KEY (base64 of 32 bytes:
secrets stored encrypted; unset: set and rotate refuse), WEBHOOK_SECRET_KEY_OLD
(unset; the previous key, for reseal), WEBHOOK_ALLOW_UNSEALED (false; true:
secrets stored raw without a key, development only).
`, DefaultAddr, cli.Dur(idempotency.DefaultKeyRetention), accept.DefaultBatch, cli.Dur(accept.DefaultLinger), httpapi.DefaultRateLimit,
	httpapi.DefaultMaxWaiters, carrier.DefaultBaseURL, cli.Dur(carrier.DefaultTimeout), cli.DefaultLogLevel, cli.Dur(webhook.DefaultRotationOverlap))

// DefaultAddr is API_ADDR's default: the API's listen address.
const DefaultAddr = ":8080"

// Config is the API's configuration, read once in run.
type Config struct {
	Database     cli.Database
	Addr         string
	MetricsAddr  string // API_METRICS_ADDR; empty: /metrics on Addr
	KeyRetention time.Duration
	AcceptBatch  int           // ACCEPT_BATCH; 0: off
	AcceptLinger time.Duration // ACCEPT_LINGER; 0: off
	RateLimit    int           // RATE_LIMIT: creates a second per caller; 0: off
	RateBurst    int           // RATE_LIMIT_BURST; 0: RATE_LIMIT
	MaxWaiters   int           // PREFER_WAIT_MAX; 0: Prefer: wait is never held

	// The carrier the label documents are fetched from.
	CarrierURL     string        // CARRIER_URL
	CarrierToken   string        // CARRIER_TOKEN
	CarrierTimeout time.Duration // CARRIER_TIMEOUT

	WebhookAllowInsecure   bool
	WebhookAllowPrivate    bool
	WebhookRotationOverlap time.Duration
	WebhookSecretKeys      webhook.SecretKeys // WEBHOOK_SECRET_KEY, WEBHOOK_SECRET_KEY_OLD, WEBHOOK_ALLOW_UNSEALED; parsed by Validate
	webhookSecretKey       webhook.SecretKey
}

// Validate checks the values that parsing alone cannot.
func (c *Config) Validate() error {
	if c.KeyRetention <= 0 {
		return fmt.Errorf("KEY_RETENTION=%s: must be positive", c.KeyRetention)
	}
	if c.AcceptBatch < 0 || c.AcceptBatch > 1000 {
		return fmt.Errorf("ACCEPT_BATCH=%d: want 0 to 1000", c.AcceptBatch)
	}
	if c.AcceptLinger < 0 || c.AcceptLinger > time.Second {
		return fmt.Errorf("ACCEPT_LINGER=%s: want 0 (off) to 1s", c.AcceptLinger)
	}
	if c.RateLimit < 0 || c.RateLimit > 1_000_000 {
		return fmt.Errorf("RATE_LIMIT=%d: want 0 (off) to 1000000 creates a second per caller", c.RateLimit)
	}
	if c.RateBurst < 0 || c.RateBurst > 1_000_000 {
		return fmt.Errorf("RATE_LIMIT_BURST=%d: want 0 (RATE_LIMIT) to 1000000", c.RateBurst)
	}
	if c.MaxWaiters < 0 || c.MaxWaiters > 100_000 {
		return fmt.Errorf("PREFER_WAIT_MAX=%d: want 0 to 100000", c.MaxWaiters)
	}
	if c.CarrierTimeout <= 0 {
		return fmt.Errorf("CARRIER_TIMEOUT=%s: must be positive", c.CarrierTimeout)
	}
	if c.WebhookRotationOverlap < 0 {
		return fmt.Errorf("WEBHOOK_ROTATION_OVERLAP=%s: must not be negative", c.WebhookRotationOverlap)
	}
	k, err := c.WebhookSecretKeys.Parse()
	if err != nil {
		return err
	}
	c.webhookSecretKey = k
	return nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if cli.PrintVersion("api", args, stdout) {
		return 0
	}
	env := cli.NewEnv(ctx, getenv)
	cfg := Config{
		Database:     env.Database(),
		Addr:         env.String("API_ADDR", DefaultAddr),
		MetricsAddr:  env.String("API_METRICS_ADDR", ""),
		KeyRetention: env.Duration("KEY_RETENTION", idempotency.DefaultKeyRetention),
		AcceptBatch:  env.Int("ACCEPT_BATCH", accept.DefaultBatch),
		AcceptLinger: env.Duration("ACCEPT_LINGER", accept.DefaultLinger),
		RateLimit:    env.Int("RATE_LIMIT", httpapi.DefaultRateLimit),
		RateBurst:    env.Int("RATE_LIMIT_BURST", 0),
		MaxWaiters:   env.Int("PREFER_WAIT_MAX", httpapi.DefaultMaxWaiters),

		CarrierURL:     env.String("CARRIER_URL", carrier.DefaultBaseURL),
		CarrierToken:   env.String("CARRIER_TOKEN", ""),
		CarrierTimeout: env.Duration("CARRIER_TIMEOUT", carrier.DefaultTimeout),

		WebhookAllowInsecure:   env.Bool("WEBHOOK_ALLOW_INSECURE", false),
		WebhookAllowPrivate:    env.Bool("WEBHOOK_ALLOW_PRIVATE", false),
		WebhookRotationOverlap: env.Duration("WEBHOOK_ROTATION_OVERLAP", webhook.DefaultRotationOverlap),
		WebhookSecretKeys:      webhook.SecretKeysFromEnv(env),
	}
	log := cli.Logger(env, stderr, "api")
	otel := cli.TracingEnv(env)

	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "")
	fs.StringVar(&cfg.Database.URL, "database-url", cfg.Database.URL, "")
	if code, ok := cli.ParseFlags(fs, args[1:], usage, stdout, stderr); !ok {
		return code
	}
	db, ok := cli.Endpoints("api", env, cfg.Validate, cfg.Database, stderr)
	if !ok {
		return 2
	}

	rest := fs.Args()
	switch {
	case len(rest) == 0:
	case rest[0] == "migrate" && len(rest) == 1:
		return migrate(ctx, db.Session(), stdout, stderr)
	case rest[0] == "caller" && len(rest) == 3 && rest[1] == "add":
		return addCaller(ctx, db.Pool, rest[2], stdout, stderr)
	case rest[0] == "webhook":
		return webhookCmd(ctx, cfg, db.Pool, rest[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "api: unknown command %q; see api --help\n", rest)
		return 2
	}

	stopTracing, ok := cli.Tracing(ctx, "api", otel, log, stderr)
	if !ok {
		return 2
	}
	defer stopTracing()
	ctx, cancel := cli.ServiceContext(ctx, log)
	defer cancel()
	return serve(ctx, cfg, db, log)
}

func serve(ctx context.Context, cfg Config, db postgres.Endpoints, log zerolog.Logger) int {
	maxWaiters := cfg.MaxWaiters
	if maxWaiters == 0 {
		maxWaiters = -1 // httpapi.Deps: none held
	}
	svc, err := apiserve.Start(ctx, db, apiserve.Options{KeyRetention: cfg.KeyRetention, AcceptBatch: cli.Batch(cfg.AcceptBatch),
		AcceptLinger: cli.Linger(cfg.AcceptLinger),
		RateLimit:    httpapi.RateLimit{PerSecond: float64(cfg.RateLimit), Burst: cfg.RateBurst}, MaxWaiters: maxWaiters,
		Carrier: carrier.NewClient(cfg.CarrierURL, &carrier.ClientOpts{Token: cfg.CarrierToken}), CarrierTimeout: cfg.CarrierTimeout,
		MetricsElsewhere: cfg.MetricsAddr != ""}, log)
	if err != nil {
		log.Error().Err(err).Msg("database pool")
		return 1
	}
	defer svc.Close()
	// A schema behind this binary would fail every request: refuse to start.
	// A database away at start is let be (the pool connects lazily, /readyz
	// answers 503); the version is read once it answers.
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	err = svc.Schema.Check(cctx)
	ccancel()
	if migrations.IsBehind(err) {
		log.Error().Msg("refusing to start: " + err.Error())
		return 1
	} else if err != nil {
		log.Warn().Err(err).Msg("schema version not read (the database does not answer): /readyz answers 503 until it does")
	}
	if cfg.MetricsAddr != "" {
		msrv, err := svc.Metrics().Serve(cfg.MetricsAddr, nil, log)
		if err != nil {
			log.Error().Err(err).Str("addr", cfg.MetricsAddr).Msg("metrics listener")
			return 1
		}
		defer msrv.Close()
	}
	srv := httpapi.NewHTTPServer(svc.Handler, httpapi.Limits{})
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		log.Error().Err(err).Str("addr", cfg.Addr).Msg("listen")
		return 1
	}
	log.Info().Str("addr", ln.Addr().String()).Msg("listening")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		log.Error().Err(err).Msg("serve")
		return 1
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down: finishing in-flight requests")
	sctx, scancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error().Err(err).Msg("shutdown")
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}

func migrate(ctx context.Context, poolCfg *pgxpool.Config, stdout, stderr io.Writer) int {
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		fmt.Fprintf(stderr, "api migrate: %v\n", err)
		return 1
	}
	defer pool.Close()
	res, err := migrations.Apply(ctx, pool)
	if err != nil {
		fmt.Fprintf(stderr, "api migrate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "river migrations applied: %d\n", res.RiverApplied)
	for _, m := range res.Applied {
		fmt.Fprintf(stdout, "applied %s\n", m)
	}
	if len(res.Applied) == 0 {
		fmt.Fprintln(stdout, "migrations up to date")
	}
	return 0
}

func addCaller(ctx context.Context, poolCfg *pgxpool.Config, name string, stdout, stderr io.Writer) int {
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		fmt.Fprintf(stderr, "api caller add: %v\n", err)
		return 1
	}
	defer pool.Close()
	if err := migrations.Check(ctx, pool); err != nil {
		fmt.Fprintf(stderr, "api caller add: %v\n", err)
		return 1
	}
	token, err := postgres.AddCaller(ctx, pool, name)
	if errors.Is(err, postgres.ErrInvalidCallerName) {
		fmt.Fprintf(stderr, "api caller add: %v\n", err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "api caller add: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "caller %s: new token (only its SHA-256 is stored; keep it now)\n", name)
	fmt.Fprintln(stdout, token)
	return 0
}
