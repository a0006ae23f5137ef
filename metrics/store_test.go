package metrics_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
)

func storeRegistry(pool *pgxpool.Pool) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(metrics.NewStoreCollector(pool))
	return r
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// Intents not yet final are counted in age buckets; the oldest one's age and
// the outbox lag follow the intents as they age, are dispatched and finish.
func TestPendingIntentsByAgeOldestAndOutboxLag(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true}) // no relay: intents stay undispatched and pending
	g := storeRegistry(s.Pool)
	tok := s.Token("fulfilment")
	byAge := func() map[string]float64 {
		out := map[string]float64{}
		for _, a := range []string{metrics.AgeUnder1m, metrics.Age1mTo10m, metrics.Age10mTo1h, metrics.AgeOver1h} {
			_, ok := sample(t, g, "labels_intents_pending_by_age", "age", a)
			require.True(t, ok, "every bucket is exposed, also when empty: %s", a)
			out[a] = value(t, g, "labels_intents_pending_by_age", "age", a)
		}
		return out
	}

	require.Equal(t, 1.0, value(t, g, "labels_store_up"))
	require.Equal(t, 0.0, value(t, g, "labels_intents_pending"))
	require.Equal(t, map[string]float64{"<1m": 0, "1m-10m": 0, "10m-1h": 0, ">1h": 0}, byAge())
	require.Equal(t, 0.0, value(t, g, "labels_intents_oldest_pending_seconds"))
	require.Equal(t, 0.0, value(t, g, "labels_outbox_lag_seconds"))

	ids := make([]string, 5)
	for i := range ids {
		ids[i] = s.Accept(tok, "k-age-"+string(rune('a'+i)), stacktest.ParcelBody(40, i+1, 100)).ID
	}
	// Age them, and their rows of the relay's queue: 0s, 5 min, 30 min, 2 h and 3 h.
	for i, age := range []string{"0 seconds", "5 minutes", "30 minutes", "2 hours", "3 hours"} {
		exec(t, s.Pool, `WITH i AS (UPDATE label_intents SET created_at = now() - $2::interval WHERE request_id = $1 RETURNING created_at)
			UPDATE label_intent_outbox SET created_at = (SELECT created_at FROM i) WHERE request_id = $1`, ids[i], age)
	}
	require.Equal(t, 5.0, value(t, g, "labels_intents_pending"))
	require.Equal(t, map[string]float64{"<1m": 1, "1m-10m": 1, "10m-1h": 1, ">1h": 2}, byAge())
	require.InDelta(t, 3*3600, value(t, g, "labels_intents_oldest_pending_seconds"), 60)
	require.InDelta(t, 3*3600, value(t, g, "labels_outbox_lag_seconds"), 60)

	// The relay dispatches the two oldest: the lag falls to the next one,
	// while they stay pending.
	exec(t, s.Pool, `DELETE FROM label_intent_outbox WHERE request_id = ANY($1)`, ids[3:])
	require.InDelta(t, 30*60, value(t, g, "labels_outbox_lag_seconds"), 60)
	require.InDelta(t, 3*3600, value(t, g, "labels_intents_oldest_pending_seconds"), 60)

	// They finish: they leave the pending counts and the oldest age.
	exec(t, s.Pool, `UPDATE label_intents SET status = 'failed', error = '{}', completed_at = now() WHERE request_id = ANY($1)`, ids[3:])
	require.Equal(t, 3.0, value(t, g, "labels_intents_pending"))
	require.Equal(t, map[string]float64{"<1m": 1, "1m-10m": 1, "10m-1h": 1, ">1h": 0}, byAge())
	require.InDelta(t, 30*60, value(t, g, "labels_intents_oldest_pending_seconds"), 60)
}

// River's jobs are counted by queue and state; finished jobs are left out.
func TestRiverJobsByQueueAndState(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	g := storeRegistry(pool)
	// An insert-only client: nothing works the jobs.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 3 {
		_, err := client.Insert(ctx, jobs.BuyLabelArgs{RequestID: "lr_" + string(rune('a'+i))}, nil)
		require.NoError(t, err)
	}
	_, err = client.Insert(ctx, jobs.SweepKeysArgs{}, nil)
	require.NoError(t, err)

	require.Equal(t, 3.0, value(t, g, "labels_river_jobs", "queue", jobs.QueueLabels, "state", "available"))
	require.Equal(t, 1.0, value(t, g, "labels_river_jobs", "queue", jobs.QueueMaintenance, "state", "available"))

	exec(t, pool, `UPDATE river_job SET state = 'retryable', scheduled_at = now() + interval '1 hour' WHERE args->>'request_id' = 'lr_a'`)
	exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE args->>'request_id' = 'lr_b'`)
	require.Equal(t, 1.0, value(t, g, "labels_river_jobs", "queue", jobs.QueueLabels, "state", "available"))
	require.Equal(t, 1.0, value(t, g, "labels_river_jobs", "queue", jobs.QueueLabels, "state", "retryable"))
	_, ok := sample(t, g, "labels_river_jobs", "queue", jobs.QueueLabels, "state", "completed")
	require.False(t, ok, "completed jobs are not queue depth")

	// A state with no job reads 0 rather than disappearing, in every queue
	// a job is in and every queue River works (river_queue).
	require.Equal(t, 0.0, value(t, g, "labels_river_jobs", "queue", jobs.QueueMaintenance, "state", "retryable"))
	exec(t, pool, `UPDATE river_job SET state = 'completed', finalized_at = now()`)
	exec(t, pool, `INSERT INTO river_queue (name, created_at, metadata, updated_at) VALUES ($1, now(), '{}', now())`, jobs.QueueLabels)
	for _, state := range []string{"available", "pending", "retryable", "running", "scheduled"} {
		require.Equal(t, 0.0, value(t, g, "labels_river_jobs", "queue", jobs.QueueLabels, "state", state), state)
	}
	_, ok = sample(t, g, "labels_river_jobs", "queue", jobs.QueueLabels, "state", "completed")
	require.False(t, ok, "finished states are not exported, not even as zeros")
}

// The latest reconciliation run's counts are exposed by category, whichever
// process ran it.
func TestReconcileLastRun(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	g := storeRegistry(pool)
	_, ok := sample(t, g, "labels_reconcile_last_run_timestamp_seconds")
	require.False(t, ok, "no run yet: no series")

	insert := func(finished string, counts string) {
		t.Helper()
		exec(t, pool, `INSERT INTO reconcile_runs (started_at, finished_at, source, period, grace, stuck_after,
			lines_read, lines_new, labels, labels_in_grace, counts, amounts)
			VALUES ($1::timestamptz - interval '1 minute', $1, 'test.csv', ARRAY[current_date], '48 hours', '1 hour', 0, 0, 0, 0, $2, '{}')`,
			finished, counts)
	}
	insert("2026-12-01T02:00:00Z", `{"matched": 10, "duplicate_charge": 2, "stuck_intent": 0}`)
	insert("2026-12-02T02:00:00Z", `{"matched": 12, "duplicate_charge": 0, "amount_mismatch": 1, "stuck_intent": 3}`)
	insert("2026-11-30T02:00:00Z", `{"matched": 1, "duplicate_charge": 9}`) // older, imported late

	require.Equal(t, 1796176800.0, value(t, g, "labels_reconcile_last_run_timestamp_seconds"))
	require.Equal(t, 12.0, value(t, g, "labels_reconcile_last_run_items", "category", "matched"))
	require.Equal(t, 0.0, value(t, g, "labels_reconcile_last_run_items", "category", "duplicate_charge"))
	require.Equal(t, 1.0, value(t, g, "labels_reconcile_last_run_items", "category", "amount_mismatch"))
	require.Equal(t, 3.0, value(t, g, "labels_reconcile_last_run_items", "category", "stuck_intent"))
}

// A scrape that cannot reach the database says so instead of failing.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	g := storeRegistry(pool)
	require.Equal(t, 1.0, value(t, g, "labels_store_up"))
	pool.Close()
	require.Equal(t, 0.0, value(t, g, "labels_store_up"))
	_, ok := sample(t, g, "labels_intents_pending")
	require.False(t, ok)
}
