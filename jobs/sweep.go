package jobs

import (
	"context"
	"time"

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

// InsertOpts makes sweeps unique while one is queued or running, so that a
// slow purge is not joined by a second one.
func (SweepKeysArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
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
	NowFunc            func() time.Time // nil: time.Now
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
	w.Log.Info().Int64("deleted", n).Int64("tombstones_deleted", tn).Int64("webhook_events_deleted", en).Err(err).Msg("sweep_keys")
	return err
}

// SweepWebhookEvents deletes every webhook event delivered or dropped before
// before, batch by batch.
func SweepWebhookEvents(ctx context.Context, pool *pgxpool.Pool, before time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		n, err := postgres.PurgeWebhookEvents(ctx, pool, before, batch)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}

func (w *SweepKeysWorker) now() time.Time {
	if w.NowFunc != nil {
		return w.NowFunc()
	}
	return time.Now()
}

// SweepTombstones deletes every tombstone older than before, batch by batch.
func SweepTombstones(ctx context.Context, pool *pgxpool.Pool, before time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		n, err := postgres.PurgeTombstones(ctx, pool, before, batch)
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
