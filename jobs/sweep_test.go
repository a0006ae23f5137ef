package jobs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/jobs"
)

// Expired completed keys go, in batches; unexpired and started keys stay; two
// sweepers at once delete each key once. Expired means by the database's
// clock: the rows' times are set from now() in SQL, as the services set them.
func TestSweepPurgesOnlyExpiredCompletedKeys(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, response_status, response_body, created_at, expires_at)
		 SELECT 'c', 'expired-' || i, decode(repeat('00', 32), 'hex'), 1, 'lr_e' || i, 'completed', 201, '{}', now() - interval '2 days', now() - interval '1 hour'
		   FROM generate_series(1, 2500) i`,
		`INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, response_status, response_body, created_at, expires_at)
		 SELECT 'c', 'fresh-' || i, decode(repeat('00', 32), 'hex'), 1, 'lr_f' || i, 'completed', 201, '{}', now(), now() + interval '1 hour'
		   FROM generate_series(1, 10) i`,
		`INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
		 SELECT 'c', 'started-' || i, decode(repeat('00', 32), 'hex'), 1, 'lr_s' || i, 'started', now() - interval '3 days', now() - interval '2 days'
		   FROM generate_series(1, 10) i`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}

	var total atomic.Int64
	var batches atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			n, err := jobs.Sweep(ctx, pool, 300, func(int64) { batches.Add(1) })
			require.NoError(t, err)
			total.Add(n)
		})
	}
	wg.Wait()
	require.Equal(t, int64(2500), total.Load())
	require.GreaterOrEqual(t, batches.Load(), int64(2500/300))
	var expired, fresh, started int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE idem_key LIKE 'expired-%'), count(*) FILTER (WHERE idem_key LIKE 'fresh-%'), count(*) FILTER (WHERE idem_key LIKE 'started-%') FROM idempotency_keys`).Scan(&expired, &fresh, &started))
	require.Zero(t, expired)
	require.Equal(t, 10, fresh)
	require.Equal(t, 10, started, "started keys are never purged, however old")

	tombstones := dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_tombstones`)
	require.Equal(t, 2500, tombstones, "every purged key leaves a tombstone")
	tn, err := jobs.SweepTombstones(ctx, pool, time.Minute, 300)
	require.NoError(t, err)
	require.Zero(t, tn, "young tombstones stay")

	// An hour and a minute later the fresh ones are due too.
	_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = expires_at - interval '61 minutes' WHERE idem_key LIKE 'fresh-%'`)
	require.NoError(t, err)
	n, err := jobs.Sweep(ctx, pool, 300, nil)
	require.NoError(t, err)
	require.Equal(t, int64(10), n)
}

func TestRetryPolicyFullJitter(t *testing.T) {
	t.Parallel()
	p := &jobs.RetryPolicy{Base: time.Second, Max: time.Hour}
	for n := 1; n <= 40; n++ {
		ceiling := min(time.Hour, time.Second<<(n-1))
		if n > 20 {
			ceiling = time.Hour
		}
		for range 50 {
			d := p.Delay(n)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, ceiling)
		}
	}
	// Full jitter spreads: 200 draws at n=10 are not all equal.
	seen := map[time.Duration]bool{}
	for range 200 {
		seen[p.Delay(10)] = true
	}
	require.Greater(t, len(seen), 100)
}

// Completed sweep_keys jobs are kept only briefly, on their own queue: each
// sweep deletes the completed sweeps older than its JobRetention, and leaves
// younger ones and every other job, however old, to River's retention.
func TestCompletedSweepsAreKeptBriefly(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	// An old completed sweep and an old completed purchase, as River leaves them.
	for _, kind := range []string{"sweep_keys", "buy_label"} {
		_, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_at, created_at, scheduled_at, finalized_at)
			VALUES ('{}', $1, 3, 'maintenance', 'completed', 1, now() - interval '3 hours', now() - interval '3 hours', now() - interval '3 hours', now() - interval '3 hours')`, kind)
		require.NoError(t, err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &jobs.SweepKeysWorker{Pool: pool, Batch: 100, Log: zerolog.Nop(), JobRetention: time.Hour})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{jobs.QueueMaintenance: {MaxWorkers: 1}},
		Workers: workers,
		PeriodicJobs: []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(100*time.Millisecond),
			func() (river.JobArgs, *river.InsertOpts) { return jobs.SweepKeysArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true})},
		FetchPollInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.WithoutCancel(ctx)) })

	count := func(where string) int {
		n := dbtest.Scalar[int](t, pool, `SELECT count(*) FROM river_job WHERE `+where)
		return n
	}
	// Two sweeps have run: the first deleted the old one, the second kept the
	// first, which is young.
	require.Eventually(t, func() bool {
		return count(`kind = 'sweep_keys' AND state = 'completed'`) >= 2
	}, 30*time.Second, 20*time.Millisecond)
	require.Zero(t, count(`kind = 'sweep_keys' AND state = 'completed' AND finalized_at < now() - interval '1 hour'`), "the old sweep is gone")
	require.Equal(t, 1, count(`kind = 'buy_label'`), "other jobs are left to River's retention")
	require.Zero(t, count(`kind = 'sweep_keys' AND queue <> 'maintenance'`), "sweeps run on the maintenance queue")
}

// A worker whose clock is far off the database's (two days ahead, more than
// KEY_RETENTION; or two days behind) purges by the database's clock all the
// same: nothing unexpired goes, everything expired does, and the skew is
// logged. The keys' expiry is set the way the completion sets it, from the
// database's now().
func TestSweeperIgnoresTheWorkerClock(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	insert := func(key, expiresIn string) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state,
			response_status, response_body, created_at, expires_at)
			VALUES ('c', $1, decode(repeat('00', 32), 'hex'), 1, 'lr_' || $1, 'completed', 201, '{}', now(), now() + $2::interval)`, key, expiresIn)
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `
		INSERT INTO idempotency_tombstones (caller_id, key_hash, purged_at) VALUES
			('c', sha256('old'), now() - interval '31 days'), ('c', sha256('young'), now() - interval '29 days');
		INSERT INTO webhook_events (request_id, caller_id, type, created_at, state, finished_at) VALUES
			('lr_old', 'c', 'label_request.succeeded', now() - interval '40 days', 'delivered', now() - interval '31 days'),
			('lr_young', 'c', 'label_request.succeeded', now() - interval '40 days', 'delivered', now() - interval '29 days')`)
	require.NoError(t, err)
	keys := func() string {
		return dbtest.Scalar[string](t, pool, `SELECT coalesce(string_agg(idem_key, ',' ORDER BY idem_key), '') FROM idempotency_keys`)
	}

	for _, skew := range []time.Duration{48 * time.Hour, -48 * time.Hour} {
		insert("due", "-1 second")
		insert("live", "24 hours")
		var buf logtest.Buffer
		w := &jobs.SweepKeysWorker{Pool: pool, Batch: 10, Log: zerolog.New(&buf), TombstoneRetention: 30 * 24 * time.Hour, WebhookEventRetention: 30 * 24 * time.Hour,
			NowFunc: func() time.Time { return time.Now().Add(skew) }}
		require.NoError(t, w.Work(ctx, &river.Job[jobs.SweepKeysArgs]{JobRow: &rivertype.JobRow{ID: 1, Kind: "sweep_keys"}}))
		require.Equal(t, "live", keys(), "clock %v: the expired key went, the live one stayed", skew)
		require.Equal(t, 1, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_tombstones WHERE key_hash = sha256('due')`))
		require.Equal(t, "young", dbtest.Scalar[string](t, pool,
			`SELECT string_agg(CASE key_hash WHEN sha256('young') THEN 'young' WHEN sha256('old') THEN 'old' END, ',') FROM idempotency_tombstones WHERE key_hash <> sha256('due')`))
		require.Equal(t, "lr_young", dbtest.Scalar[string](t, pool, `SELECT string_agg(request_id, ',') FROM webhook_events`))
		require.Contains(t, buf.String(), "clock skew", "clock %v: the skew is logged", skew)
		_, err := pool.Exec(ctx, `DELETE FROM idempotency_keys`)
		require.NoError(t, err)
	}

	// A worker in step with the database logs nothing of the kind.
	var buf logtest.Buffer
	w := &jobs.SweepKeysWorker{Pool: pool, Batch: 10, Log: zerolog.New(&buf)}
	require.NoError(t, w.Work(ctx, &river.Job[jobs.SweepKeysArgs]{JobRow: &rivertype.JobRow{ID: 1, Kind: "sweep_keys"}}))
	require.NotContains(t, buf.String(), "clock skew")
}
