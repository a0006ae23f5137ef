// Package worker puts together what a worker process runs: the River client
// with the buy-label, webhook delivery, sweep and void-label workers, and the
// outbox relays (intents, webhook events) that feed it; a River hook tells
// the relay of intents when purchases start, which frees room in the bounded
// backlog it keeps in River.
// cmd/worker, the test stacks and the tools build it with [New], so what is
// tested and measured is what is deployed.
package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/outbox"
	"github.com/labelkit/labels/reconcile"
)

// DefaultCarrierTimeout is CARRIER_TIMEOUT's default, the API's too.
const DefaultCarrierTimeout = carrier.DefaultTimeout

// Defaults of [Config]: a zero field takes its default (Config.WithDefaults),
// and cmd/worker reads its environment with them.
const (
	DefaultLeaseDuration         = 30 * time.Second                  // LEASE_DURATION
	DefaultConcurrency           = 100                               // WORKER_CONCURRENCY
	DefaultMaxAttempts           = 20                                // MAX_ATTEMPTS
	DefaultRetryBase             = time.Second                       // RETRY_BASE
	DefaultRetryMax              = time.Hour                         // RETRY_MAX
	DefaultSweepInterval         = time.Minute                       // SWEEP_INTERVAL
	DefaultSweepBatch            = 1000                              // SWEEP_BATCH
	DefaultTombstoneRetention    = jobs.DefaultTombstoneRetention    // TOMBSTONE_RETENTION
	DefaultWebhookEventRetention = jobs.DefaultWebhookEventRetention // WEBHOOK_EVENT_RETENTION
	DefaultIntentRetention       = jobs.DefaultIntentRetention       // INTENT_RETENTION
	DefaultReconcileRetention    = reconcile.DefaultRetention        // RECONCILE_RETENTION
)

// Config configures a [Worker]. Zero values take the defaults above (and
// KeyRetention idempotency.DefaultKeyRetention, Batch jobs.DefaultBatch,
// Webhooks jobs.WebhookConfig's).
type Config struct {
	Pool    *pgxpool.Pool
	Carrier jobs.Carrier
	// CarrierTimeout bounds one carrier call; it must be below
	// LeaseDuration.
	CarrierTimeout time.Duration
	LeaseDuration  time.Duration
	KeyRetention   time.Duration
	Concurrency    int // carrier calls in flight
	// RelayBacklog bounds the purchases waiting to run in River's queue
	// (every worker's together): the relay moves no more intents into River,
	// and the rest wait in the outbox, where the callers take turns
	// (outbox.RelayOpts.Backlog). 0: [RelayBacklogPerSlot] × Concurrency;
	// negative: no bound.
	RelayBacklog int
	// RelayLinger is how long the relay of intents, woken by an accept's
	// notification, waits for more before it dispatches
	// (outbox.RelayOpts.Linger). 0: [DefaultRelayLinger]; negative: none.
	RelayLinger time.Duration
	// Batch bounds the jobs that share a lease or completion statement
	// (jobs.BuyLabelConfig.BatchMax): a negative value one statement per job.
	Batch       int
	MaxAttempts int
	RetryBase   time.Duration
	RetryMax    time.Duration
	// SweepInterval is how often expired keys are purged; negative: no
	// periodic sweep.
	SweepInterval         time.Duration
	SweepBatch            int
	TombstoneRetention    time.Duration // TOMBSTONE_RETENTION
	WebhookEventRetention time.Duration // WEBHOOK_EVENT_RETENTION
	IntentRetention       time.Duration // INTENT_RETENTION
	ReconcileRetention    time.Duration // RECONCILE_RETENTION
	// LabelRetention (LABEL_RETENTION) is how long a label is kept, with its
	// intent; 0, the default: for good.
	LabelRetention time.Duration

	Metrics *metrics.Metrics // nil: a fresh set
	Log     zerolog.Logger
	// Listener wakes the relay after an accept, and the relay of webhook
	// events after a completion that wrote one (the completion's own
	// transaction notifies). Nil: both poll.
	Listener *notify.Listener
	// RiverListen, when set, is the pool River's listener takes its one
	// LISTEN connection from: a direct connection while Pool goes through a
	// pooler in transaction mode. PollOnly makes River poll for jobs and
	// leadership instead of listening: a pooled Pool and no direct
	// connection.
	RiverListen *pgxpool.Pool
	PollOnly    bool

	// PeriodicJobs are added to River's (the sweep is always there);
	// AddWorkersFunc registers further workers (the reconcile job).
	PeriodicJobs   []*river.PeriodicJob
	AddWorkersFunc func(*river.Workers) error

	// For tests: how often River and the relay poll (defaults: River's
	// FetchPollInterval of jobs, 1s; the quiet queues at
	// QuietFetchPollInterval, jobs.QuietFetchPollInterval, or at
	// FetchPollInterval when that is set below its default), River's fetch cooldown, River's
	// TestOnly mode, and a hook between the carrier's answer and the
	// completion (see jobs.BuyLabelConfig).
	FetchPollInterval      time.Duration
	QuietFetchPollInterval time.Duration
	FetchCooldown          time.Duration
	RelayPollInterval      time.Duration
	TestOnly               bool
	AfterCarrierFunc       func(ctx context.Context, requestID string) error
	// AfterVoidFunc is jobs.VoidLabelWorker's AfterCarrierFunc, for tests.
	AfterVoidFunc func(ctx context.Context, carrierLabelID string) error

	// Webhooks configures the delivery of completion webhooks (its Pool,
	// Log and Concurrency are this config's; zero values take the defaults),
	// on the queue webhooks with WebhookConcurrency deliveries in flight
	// (default jobs.DefaultWebhookConcurrency), at most
	// Webhooks.EndpointConcurrency of them at one endpoint.
	Webhooks           jobs.WebhookConfig
	WebhookConcurrency int
}

// RelayBacklogPerSlot is the default RelayBacklog per carrier call in flight:
// River's queue holds enough for the slots to refill twice before the relay
// must have refilled it, and a new caller's intent waits behind no more than
// that.
const RelayBacklogPerSlot = 2

// DefaultRelayLinger is RelayLinger's default (RELAY_LINGER's): at a
// moderate rate each API process notifies up to every 100 ms
// (notify.DefaultInterval), and the relay then takes the intents of those
// 100 ms in one transaction, which River fetches, leases and completes as
// one batch: at 400 creates/s about 40 purchases share each of the
// worker's statements instead of about 8 (docs/design.md, The cost of a
// label at a moderate rate). It adds up to 100 ms to a create's time to
// final; under load the relay is woken by room in River's backlog and its
// poll, which never linger.
const DefaultRelayLinger = 100 * time.Millisecond

// WithDefaults returns c with each zero field set to its default; applied
// twice it changes nothing more.
func (c Config) WithDefaults() Config {
	or := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	or(&c.CarrierTimeout, DefaultCarrierTimeout)
	or(&c.LeaseDuration, DefaultLeaseDuration)
	or(&c.KeyRetention, idempotency.DefaultKeyRetention)
	or(&c.RetryBase, DefaultRetryBase)
	or(&c.RetryMax, DefaultRetryMax)
	or(&c.SweepInterval, DefaultSweepInterval)
	or(&c.TombstoneRetention, DefaultTombstoneRetention)
	or(&c.WebhookEventRetention, DefaultWebhookEventRetention)
	or(&c.IntentRetention, DefaultIntentRetention)
	or(&c.ReconcileRetention, DefaultReconcileRetention)
	if c.QuietFetchPollInterval == 0 && c.FetchPollInterval != 0 && c.FetchPollInterval < jobs.FetchPollInterval {
		c.QuietFetchPollInterval = c.FetchPollInterval // a test's fast poll, on every queue
	}
	or(&c.FetchPollInterval, jobs.FetchPollInterval)
	or(&c.QuietFetchPollInterval, max(jobs.QuietFetchPollInterval, c.FetchPollInterval))
	or(&c.Webhooks.Timeout, jobs.DefaultWebhookTimeout)
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	or(&c.RelayLinger, DefaultRelayLinger)
	if c.RelayBacklog == 0 {
		c.RelayBacklog = RelayBacklogPerSlot * c.Concurrency
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.SweepBatch <= 0 {
		c.SweepBatch = DefaultSweepBatch
	}
	if c.WebhookConcurrency <= 0 {
		c.WebhookConcurrency = jobs.DefaultWebhookConcurrency
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New(metrics.Worker)
	}
	return c
}

// Worker is a River client with the project's workers, and the relay.
type Worker struct {
	// River is the client; Relay feeds it the intents, EventRelay the
	// webhook events.
	River      *river.Client[pgx.Tx]
	Relay      *outbox.Relay
	EventRelay *outbox.Relay

	cfg       Config
	stopRelay context.CancelFunc
	relayDone sync.WaitGroup
}

// New builds a worker; [Worker.Start] starts it.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if cfg.CarrierTimeout >= cfg.LeaseDuration {
		return nil, errors.New("worker: the carrier timeout must be below the lease, or a slow carrier call outlives its lease")
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewBuyLabelWorker(jobs.BuyLabelConfig{
		Pool:             cfg.Pool,
		Carrier:          cfg.Carrier,
		CarrierTimeout:   cfg.CarrierTimeout,
		LeaseDuration:    cfg.LeaseDuration,
		KeyRetention:     cfg.KeyRetention,
		MaxAttempts:      cfg.MaxAttempts,
		BatchMax:         cfg.Batch,
		Metrics:          cfg.Metrics,
		Log:              cfg.Log,
		AfterCarrierFunc: cfg.AfterCarrierFunc,
	}))
	hooks := cfg.Webhooks
	hooks.Pool, hooks.Log, hooks.Concurrency = cfg.Pool, cfg.Log, cfg.WebhookConcurrency
	river.AddWorker(workers, jobs.NewDeliverWebhookWorker(hooks))
	river.AddWorker(workers, &jobs.SweepKeysWorker{Pool: cfg.Pool, Batch: cfg.SweepBatch, TombstoneRetention: cfg.TombstoneRetention,
		WebhookEventRetention: cfg.WebhookEventRetention, IntentRetention: cfg.IntentRetention, ReconcileRetention: cfg.ReconcileRetention,
		LabelRetention: cfg.LabelRetention,
		Metrics:        cfg.Metrics, Log: cfg.Log})
	// The quiet queues poll less often than the busy ones: see
	// jobs.QuietFetchPollInterval.
	quiet := cfg.QuietFetchPollInterval
	queues := map[string]river.QueueConfig{
		jobs.QueueLabels:   {MaxWorkers: cfg.Concurrency},
		jobs.QueueWebhooks: {MaxWorkers: cfg.WebhookConcurrency},
		river.QueueDefault: {MaxWorkers: 2, FetchPollInterval: quiet},
		// sweep_keys, apart, so that River UI shows purchases apart from it.
		jobs.QueueMaintenance: {MaxWorkers: 1, FetchPollInterval: quiet},
	}
	// Every worker with a carrier that voids (carrier.Client does) runs the
	// voids of `reconcile void`; one without takes none of them.
	if voider, ok := cfg.Carrier.(jobs.Voider); ok {
		queues[jobs.QueueVoids] = river.QueueConfig{MaxWorkers: 4, FetchPollInterval: quiet}
		river.AddWorker(workers, &jobs.VoidLabelWorker{Pool: cfg.Pool, Carrier: voider, CarrierTimeout: cfg.CarrierTimeout,
			MaxAttempts: cfg.MaxAttempts, Metrics: cfg.Metrics, Log: cfg.Log, AfterCarrierFunc: cfg.AfterVoidFunc})
	}
	if cfg.AddWorkersFunc != nil {
		if err := cfg.AddWorkersFunc(workers); err != nil {
			return nil, err
		}
	}
	periodic := cfg.PeriodicJobs
	if cfg.SweepInterval > 0 {
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(cfg.SweepInterval),
			func() (river.JobArgs, *river.InsertOpts) { return jobs.SweepKeysArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true}))
	}
	jobTimeout, rescueAfter := jobs.RiverTimings(cfg.LeaseDuration)
	// A delivery's job runs longer than a lease when WEBHOOK_TIMEOUT is long:
	// it is not rescued while it may still run.
	rescueAfter = max(rescueAfter, jobs.WebhookJobTimeout(cfg.Webhooks.Timeout)+15*time.Second)
	// A purchase that starts frees room in River's backlog: it tells the relay.
	started := &startHook{}
	var driver riverdriver.Driver[pgx.Tx] = riverpgxv5.New(cfg.Pool)
	if cfg.RiverListen != nil && !cfg.PollOnly {
		driver = listenDriver{Driver: riverpgxv5.New(cfg.Pool), listen: riverpgxv5.New(cfg.RiverListen)}
	}
	client, err := river.NewClient(driver, &river.Config{
		PollOnly:             cfg.PollOnly,
		Queues:               queues,
		Workers:              workers,
		PeriodicJobs:         periodic,
		FetchPollInterval:    cfg.FetchPollInterval,
		FetchCooldown:        cfg.FetchCooldown,
		JobTimeout:           jobTimeout,
		RescueStuckJobsAfter: rescueAfter,
		// Room above MaxAttempts for database errors: the carrier attempts are
		// counted on the key, and the last one saves 502 carrier_unavailable.
		MaxAttempts: cfg.MaxAttempts + 10,
		RetryPolicy: &jobs.RetryPolicy{Base: cfg.RetryBase, Max: cfg.RetryMax},
		// Finished jobs are kept as long as the keys they completed.
		CompletedJobRetentionPeriod: cfg.KeyRetention,
		// River's warnings and errors (everything at LOG_LEVEL=debug), on
		// the process's logger.
		Logger:   NewRiverLogger(cfg.Log),
		TestOnly: cfg.TestOnly,
		Hooks:    []rivertype.Hook{started},
		// With tracing on: a job continues the trace of the request that
		// asked for it (the traceparent in its metadata).
		Middleware: tracing.RiverMiddleware(),
	})
	if err != nil {
		return nil, err
	}
	relay := outbox.NewRelay(cfg.Pool, client, cfg.Log, &outbox.RelayOpts{
		Backlog:        max(cfg.RelayBacklog, 0), // negative: no bound, outbox's 0
		Listener:       cfg.Listener,
		PollInterval:   cfg.RelayPollInterval,
		Linger:         max(cfg.RelayLinger, 0),
		OnDispatchFunc: func(n int) { cfg.Metrics.RelayDispatched.Add(float64(n)) },
	})
	started.relay.Store(relay)
	events := outbox.NewEventRelay(cfg.Pool, client, cfg.Log, &outbox.RelayOpts{
		Listener:     cfg.Listener,
		PollInterval: cfg.RelayPollInterval,
	})
	return &Worker{River: client, Relay: relay, EventRelay: events, cfg: cfg}, nil
}

// Start starts River (an error when the database cannot be reached: call it
// again) and then the relay, which runs until [Worker.Stop].
func (w *Worker) Start(ctx context.Context) error {
	if err := w.River.Start(ctx); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.stopRelay = cancel
	w.relayDone.Go(func() { w.Relay.Run(rctx) })
	w.relayDone.Go(func() { w.EventRelay.Run(rctx) })
	return nil
}

// Stop stops the relay, then River gracefully: it takes no new job and waits
// for the running ones, whose carrier calls are detached from cancellation
// and bounded by the carrier timeout, so every started purchase is recorded.
// ctx bounds the wait; by default it is the carrier timeout plus the lease.
func (w *Worker) Stop(ctx context.Context) error {
	if w.stopRelay != nil {
		w.stopRelay()
		w.relayDone.Wait()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.cfg.CarrierTimeout+w.cfg.LeaseDuration)
		defer cancel()
	}
	return w.River.Stop(ctx)
}

// startHook tells the relay of every purchase that starts to run.
type startHook struct {
	river.HookDefaults
	relay atomic.Pointer[outbox.Relay]
}

var _ rivertype.HookWorkBegin = (*startHook)(nil)

func (h *startHook) WorkBegin(_ context.Context, job *rivertype.JobRow) error {
	if r := h.relay.Load(); r != nil && job.Kind == (jobs.BuyLabelArgs{}).Kind() {
		r.JobStarted()
	}
	return nil
}

// listenDriver is River's pgx driver on a pool, but for its listener, which
// holds its LISTEN connection on another pool (a direct one): LISTEN does not
// survive a pooler in transaction mode.
type listenDriver struct {
	*riverpgxv5.Driver
	listen *riverpgxv5.Driver
}

func (d listenDriver) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	return d.listen.GetListener(params)
}
