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
// so no lock is held for long; started keys are never touched.
type SweepKeysWorker struct {
	river.WorkerDefaults[SweepKeysArgs]
	Pool    *pgxpool.Pool
	Batch   int
	Metrics *metrics.Metrics
	Log     zerolog.Logger
	// TombstoneRetention is how long the tombstone of a purged key is kept
	// (default 30 days).
	TombstoneRetention time.Duration
	// JobRetention is how long completed sweep_keys jobs are kept (default
	// MaintenanceJobRetention).
	JobRetention time.Duration
	NowFunc      func() time.Time // nil: time.Now
}

// Work implements river.Worker.
func (w *SweepKeysWorker) Work(ctx context.Context, _ *river.Job[SweepKeysArgs]) error {
	n, err := Sweep(ctx, w.Pool, w.now(), w.Batch, func(deleted int64) {
		if w.Metrics != nil {
			w.Metrics.SweeperDeleted.Add(float64(deleted))
		}
	})
	if err != nil {
		w.Log.Warn().Int64("deleted", n).Err(err).Msg("sweep_keys")
		return err
	}
	retention := w.TombstoneRetention
	if retention <= 0 {
		retention = 30 * 24 * time.Hour
	}
	tn, err := SweepTombstones(ctx, w.Pool, w.now().Add(-retention), w.Batch)
	if err != nil {
		w.Log.Warn().Int64("deleted", n).Int64("tombstones_deleted", tn).Err(err).Msg("sweep_keys")
		return err
	}
	// Finished webhook events are kept as long as tombstones, for looking
	// into a caller's report; they guard nothing once final.
	en, err := SweepWebhookEvents(ctx, w.Pool, w.now().Add(-retention), w.Batch)
	jn := 0
	if err == nil {
		jn, err = w.pruneSweeps(ctx)
	}
	w.Log.Info().Int64("deleted", n).Int64("tombstones_deleted", tn).Int64("webhook_events_deleted", en).
		Int("sweep_jobs_deleted", jn).Err(err).Msg("sweep_keys")
	return err
}

// SweepWebhookEvents deletes every webhook event delivered or dropped before
// before, batch by batch.
func SweepWebhookEvents(ctx context.Context, pool *pgxpool.Pool, before time.Time, batch int) (int64, error) {
	return purgeAll(ctx, pool, postgres.PurgeWebhookEvents, before, batch)
}

// pruneSweeps deletes the completed sweep_keys jobs finished more than
// JobRetention ago, through River's own API (River owns its tables).
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
		Where("finalized_at < @before", river.NamedArgs{"before": w.now().Add(-keep)}).
		First(10000))
	if err != nil {
		return 0, err
	}
	return len(res.Jobs), nil
}

func (w *SweepKeysWorker) now() time.Time {
	if w.NowFunc != nil {
		return w.NowFunc()
	}
	return time.Now()
}

// SweepTombstones deletes every tombstone older than before, batch by batch.
func SweepTombstones(ctx context.Context, pool *pgxpool.Pool, before time.Time, batch int) (int64, error) {
	return purgeAll(ctx, pool, postgres.PurgeTombstones, before, batch)
}

// purgeAll calls purge (rows older than before, at most batch a statement)
// until a statement deletes fewer than batch, and returns how many it deleted.
func purgeAll(ctx context.Context, pool *pgxpool.Pool, purge func(context.Context, postgres.DB, time.Time, int) (int64, error),
	before time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		n, err := purge(ctx, pool, before, batch)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}

// Sweep purges every completed key that expired before now, batch by batch,
// leaving a tombstone for each, and returns how many it deleted.
func Sweep(ctx context.Context, pool *pgxpool.Pool, now time.Time, batch int, onBatch func(int64)) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		n, err := postgres.Purge(ctx, pool, now, batch)
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
