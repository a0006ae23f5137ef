package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/reconcile"
)

// SweepKeysArgs asks for one purge of expired key records.
type SweepKeysArgs struct{}

// Kind implements river.JobArgs.
func (SweepKeysArgs) Kind() string { return "sweep_keys" }

// QueueMaintenance is the queue of the periodic maintenance job sweep_keys:
// apart from the purchases, so that River UI's queue view shows them apart.
const QueueMaintenance = "maintenance"

// MaintenanceJobRetention is how long a completed sweep_keys job is kept.
// River's completed-job retention (KEY_RETENTION) is one setting for every
// job, and a sweep every minute would otherwise leave ~1,440 completed rows
// a day to bury the buy_label jobs in River UI; each sweep deletes the
// completed sweeps older than this.
const MaintenanceJobRetention = time.Hour

// InsertOpts makes sweeps unique while one is queued or running, so that a
// slow purge is not joined by a second one.
func (SweepKeysArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}}
}

// SweepKeysWorker deletes completed keys past expires_at in batches on the
// expires_at index until none are left. Each batch is its own short statement,
// so no lock is held for long; started keys are never touched. Every time it
// compares is the database's (now() in the statements): a worker whose clock
// is off purges nothing early or late. It measures that clock against the
// database's on each run and warns past [MaxClockSkew].
type SweepKeysWorker struct {
	river.WorkerDefaults[SweepKeysArgs]
	Pool    *pgxpool.Pool
	Batch   int
	Metrics *metrics.Metrics
	Log     zerolog.Logger
	// TombstoneRetention is how long the tombstone of a purged key is kept
	// (default 30 days).
	TombstoneRetention time.Duration
	// WebhookEventRetention is how long a delivered or dropped webhook event
	// is kept after it finished (default DefaultWebhookEventRetention).
	WebhookEventRetention time.Duration
	// IntentRetention is how long a failed intent is kept after it failed
	// (default DefaultIntentRetention).
	IntentRetention time.Duration
	// ReconcileRetention is how long a saved reconciliation run is kept after
	// it started (default reconcile.DefaultRetention).
	ReconcileRetention time.Duration
	// LabelRetention is how long a label is kept after it was created, with
	// its intent; 0 (the default): labels are kept.
	LabelRetention time.Duration
	// JobRetention is how long completed sweep_keys jobs are kept (default
	// MaintenanceJobRetention).
	JobRetention time.Duration
	// NowFunc is the worker's clock (nil: time.Now). It decides nothing
	// here: it is only measured against the database's, to warn of a skew.
	NowFunc func() time.Time
}

// Defaults of the retentions the sweep applies (docs/operations.md,
// Retention).
const (
	DefaultTombstoneRetention    = 30 * 24 * time.Hour // TOMBSTONE_RETENTION
	DefaultWebhookEventRetention = 7 * 24 * time.Hour  // WEBHOOK_EVENT_RETENTION
	// DefaultIntentRetention (INTENT_RETENTION) is above the carrier's void
	// window (30 days for the simulator): a run may still find the purchase
	// of a failed intent billed and void it, which needs the intent
	// (reconcile's plan refuses to void a line whose intent it cannot read).
	DefaultIntentRetention = 60 * 24 * time.Hour
)

// MaxClockSkew is how far a worker's clock may be from the database's
// without a warning. No time written to or compared with the pipeline's rows
// comes from a process clock; a worker's clock still schedules River's
// retries and snoozes (a worker behind by more than a snooze retries a held
// lease at once, ahead delays its retries by the skew) and dates the webhook
// signatures (receivers allow 5 minutes). A sweep that measures more logs
// "clock skew" at warn level.
const MaxClockSkew = time.Second

// Work implements river.Worker.
func (w *SweepKeysWorker) Work(ctx context.Context, job *river.Job[SweepKeysArgs]) error {
	log := jobLogger(ctx, w.Log, job.JobRow)
	w.checkClock(ctx, log)
	n, err := Sweep(ctx, w.Pool, w.Batch, func(deleted int64) {
		if w.Metrics != nil {
			w.Metrics.SweeperDeleted.Add(float64(deleted))
		}
	})
	if err != nil {
		log.Warn().Int64("deleted", n).Err(err).Msg("sweep_keys")
		return err
	}
	tn, err := w.sweepRetained(ctx)
	jn := 0
	if err == nil {
		jn, err = w.pruneSweeps(ctx)
	}
	ev := log.Info()
	if err != nil {
		ev = log.Warn()
	}
	ev = ev.Int64("deleted", n)
	for _, t := range RetainedTables {
		ev = ev.Int64(t+"_deleted", tn[t])
	}
	ev.Int("sweep_jobs_deleted", jn).Err(err).Msg("sweep_keys")
	return err
}

// RetainedTables are the tables the sweep purges after the key records, each
// after its own retention (docs/operations.md, Retention), in the order it
// sweeps them, as the table label of labels_sweeper_deleted_rows_total and
// the "<table>_deleted" fields of the sweep's log line.
var RetainedTables = metrics.SweptTables

// sweepRetained purges each of RetainedTables past its retention, batch by
// batch, and returns how many rows it deleted of each. It stops at the first
// error.
func (w *SweepKeysWorker) sweepRetained(ctx context.Context) (map[string]int64, error) {
	def := func(d, fallback time.Duration) time.Duration {
		if d <= 0 {
			return fallback
		}
		return d
	}
	purges := map[string]func() (int64, error){
		"idempotency_tombstones": func() (int64, error) {
			return SweepTombstones(ctx, w.Pool, def(w.TombstoneRetention, DefaultTombstoneRetention), w.Batch)
		},
		"webhook_events": func() (int64, error) {
			return SweepWebhookEvents(ctx, w.Pool, def(w.WebhookEventRetention, DefaultWebhookEventRetention), w.Batch)
		},
		"label_intents": func() (int64, error) {
			return SweepFailedIntents(ctx, w.Pool, def(w.IntentRetention, DefaultIntentRetention), w.Batch)
		},
		"reconcile_runs": func() (int64, error) {
			return SweepReconcileRuns(ctx, w.Pool, def(w.ReconcileRetention, reconcile.DefaultRetention))
		},
		"labels": func() (int64, error) {
			if w.LabelRetention <= 0 {
				return 0, nil
			}
			return purgeAll(ctx, w.Pool, postgres.PurgeLabels, w.LabelRetention, w.Batch)
		},
		"invoice_lines": func() (int64, error) {
			return purgeAll(ctx, w.Pool, reconcile.PurgeInvoiceLines, def(w.ReconcileRetention, reconcile.DefaultRetention), w.Batch)
		},
	}
	deleted := make(map[string]int64, len(RetainedTables))
	for _, t := range RetainedTables {
		n, err := purges[t]()
		deleted[t] = n
		if w.Metrics != nil && n > 0 {
			w.Metrics.SweeperDeletedRows.WithLabelValues(t).Add(float64(n))
		}
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// SweepFailedIntents deletes every failed intent that failed more than
// retention ago and that nothing reads any more (postgres.PurgeFailedIntents),
// batch by batch.
func SweepFailedIntents(ctx context.Context, pool *pgxpool.Pool, retention time.Duration, batch int) (int64, error) {
	return purgeAll(ctx, pool, postgres.PurgeFailedIntents, retention, batch)
}

// SweepReconcileRuns deletes the saved reconciliation runs that started more
// than retention ago, one run (summary, items, void items) a transaction,
// and returns how many it deleted (reconcile.PurgeRun says which are kept).
func SweepReconcileRuns(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	var n int64
	for {
		id, err := reconcile.PurgeRun(ctx, pool, retention)
		if err != nil || id == 0 {
			return n, err
		}
		n++
	}
}

// SweepWebhookEvents deletes every webhook event delivered or dropped more
// than retention ago (by the database's clock), batch by batch.
func SweepWebhookEvents(ctx context.Context, pool *pgxpool.Pool, retention time.Duration, batch int) (int64, error) {
	return purgeAll(ctx, pool, postgres.PurgeWebhookEvents, retention, batch)
}

// checkClock warns when the worker's clock is more than MaxClockSkew from
// the database's, beyond the measurement's own uncertainty.
func (w *SweepKeysWorker) checkClock(ctx context.Context, log zerolog.Logger) {
	skew, uncertainty, err := postgres.ClockSkew(ctx, w.Pool, w.NowFunc)
	if err != nil {
		return // the sweep that follows meets and reports the same error
	}
	if skew.Abs()-uncertainty > MaxClockSkew {
		log.Warn().Dur("skew_ms", skew).Dur("uncertainty_ms", uncertainty).Dur("max_clock_skew_ms", MaxClockSkew).
			Msg("clock skew: the worker's clock is off the database's (skew: database minus worker); it decides no purge, but River's retries and webhook timestamps use it: sync it (NTP)")
	}
}

// pruneSweeps deletes the completed sweep_keys jobs finished more than
// JobRetention ago by the database's clock, through River's own API (River
// owns its tables; its finalized_at is the finishing worker's clock, off by
// at most that worker's skew).
func (w *SweepKeysWorker) pruneSweeps(ctx context.Context) (int, error) {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return 0, nil // not run by a River client (a direct call): nothing to prune
	}
	keep := w.JobRetention
	if keep <= 0 {
		keep = MaintenanceJobRetention
	}
	res, err := client.JobDeleteMany(ctx, river.NewJobDeleteManyParams().
		Kinds(SweepKeysArgs{}.Kind()).
		States(rivertype.JobStateCompleted).
		Where("finalized_at < now() - make_interval(secs => @keep)", river.NamedArgs{"keep": keep.Seconds()}).
		First(10000))
	if err != nil {
		return 0, err
	}
	return len(res.Jobs), nil
}

// SweepTombstones deletes every tombstone older than retention (by the
// database's clock), batch by batch.
func SweepTombstones(ctx context.Context, pool *pgxpool.Pool, retention time.Duration, batch int) (int64, error) {
	return purgeAll(ctx, pool, postgres.PurgeTombstones, retention, batch)
}

// purgeAll calls purge (rows older than retention, at most batch a
// statement) until a statement deletes fewer than batch, and returns how many
// it deleted.
func purgeAll(ctx context.Context, pool *pgxpool.Pool, purge func(context.Context, postgres.DB, time.Duration, int) (int64, error),
	retention time.Duration, batch int) (int64, error) {
	return sweep(ctx, pool, func(ctx context.Context, db postgres.DB, batch int) (int64, error) {
		return purge(ctx, db, retention, batch)
	}, batch, nil)
}

// Sweep purges every completed key whose expires_at has passed by the
// database's clock, batch by batch, leaving a tombstone for each, and returns
// how many it deleted.
func Sweep(ctx context.Context, pool *pgxpool.Pool, batch int, onBatch func(int64)) (int64, error) {
	return sweep(ctx, pool, postgres.Purge, batch, onBatch)
}

func sweep(ctx context.Context, pool *pgxpool.Pool, purge func(context.Context, postgres.DB, int) (int64, error),
	batch int, onBatch func(int64)) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		n, err := purge(ctx, pool, batch)
		if err != nil {
			return total, err
		}
		total += n
		if onBatch != nil && n > 0 {
			onBatch(n)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}
