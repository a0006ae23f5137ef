package jobs_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/postgres"
)

// intentSet is n intents request_id prefix-1…prefix-n in status ('failed',
// 'pending' or 'succeeded', with its label), completed ago before now by the
// database's clock (created a day earlier).
type intentSet struct {
	prefix, status, ago string
	n                   int
}

// insertIntents writes the sets of intents.
func insertIntents(t testing.TB, ctx context.Context, db *pgxpool.Pool, sets []intentSet) {
	t.Helper()
	for _, set := range sets {
		insertIntentSet(t, ctx, db, set.prefix, set.status, set.ago, set.n)
	}
}

func insertIntentSet(t testing.TB, ctx context.Context, db *pgxpool.Pool, prefix, status, ago string, n int) {
	t.Helper()
	_, err := db.Exec(ctx, `
		INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no, label_version,
		                           payload, carrier_key, status, label_id, error, created_at, completed_at)
		SELECT $1 || '-' || i, 'c', $1 || '-key-' || i, sha256(convert_to($1 || i, 'UTF8')), 1, abs(hashtext($1)) + i, 1, 1,
		       '{}', 'ck-' || $1 || i, $2,
		       CASE WHEN $2 = 'succeeded' THEN 'lbl-' || $1 || '-' || i END,
		       CASE WHEN $2 = 'failed' THEN '{"status":422}'::json END,
		       now() - $3::interval - interval '1 day',
		       CASE WHEN $2 <> 'pending' THEN now() - $3::interval END
		  FROM generate_series(1, $4::int) i`, prefix, status, ago, n)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `
		INSERT INTO labels (label_id, caller_id, request_id, order_id, parcel_no, label_version, service, tracking_no,
		                    carrier_label_id, carrier_key, cost_cents, currency, created_by_key, created_at)
		SELECT label_id, caller_id, request_id, order_id, 1, 1, 'ground', 'T' || request_id, 'CL-' || request_id, carrier_key,
		       612, 'USD', idem_key, completed_at
		  FROM label_intents WHERE request_id LIKE $1 || '-%' AND status = 'succeeded'`, prefix)
	require.NoError(t, err)
}

// A failed intent goes INTENT_RETENTION after it failed, once nothing reads
// it: its key record is purged (or the key was taken by a later request),
// its row of the relay's queue is gone and its webhook event is not pending.
// Pending and succeeded intents stay however old, and so do recent failures.
// The sweep deletes in batches; the worker counts what it deleted by table.
func TestSweepDeletesOnlyFailedIntentsNothingReads(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	insertIntents(t, ctx, pool, []intentSet{
		{"gone", "failed", "61 days", 650},
		{"recent", "failed", "59 days", 5},
		{"pending", "pending", "200 days", 5},
		{"succeeded", "succeeded", "200 days", 5},
		{"keyed", "failed", "61 days", 1},
		{"rekeyed", "failed", "61 days", 1},
		{"queued", "failed", "61 days", 1},
		{"hooked", "failed", "61 days", 1},
		{"delivered", "failed", "61 days", 1},
	})
	_, err := pool.Exec(ctx, `
		-- keyed: its key record still lives; rekeyed: its key now belongs to a later request.
		INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, response_status, response_body, created_at, expires_at)
		VALUES ('c', 'keyed-key-1', decode(repeat('00', 32), 'hex'), 1, 'keyed-1', 'completed', 422, '{}', now(), now() + interval '1 hour'),
		       ('c', 'rekeyed-key-1', decode(repeat('00', 32), 'hex'), 1, 'later', 'started', NULL, NULL, now(), now() + interval '1 hour');
		INSERT INTO label_intent_outbox (created_at, request_id, caller_id)
		SELECT created_at, request_id, caller_id FROM label_intents WHERE request_id = 'queued-1';
		INSERT INTO webhook_events (request_id, caller_id, type, created_at, state, finished_at) VALUES
			('hooked-1', 'c', 'label_request.failed', now() - interval '61 days', 'pending', NULL),
			('delivered-1', 'c', 'label_request.failed', now() - interval '61 days', 'delivered', now() - interval '8 days')`)
	require.NoError(t, err)

	n, err := jobs.SweepFailedIntents(ctx, pool, 60*24*time.Hour, 300)
	require.NoError(t, err)
	require.Equal(t, int64(650+2), n, "the old failures nothing reads, over three batches")
	left := dbtest.Scalar[[]string](t, pool, `SELECT array_agg(DISTINCT split_part(request_id, '-', 1) ORDER BY split_part(request_id, '-', 1)) FROM label_intents`)
	require.Equal(t, []string{"hooked", "keyed", "pending", "queued", "recent", "succeeded"}, left)
	require.Equal(t, 5, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM label_intents WHERE request_id LIKE 'recent-%'`))

	// Through the worker: the queue's row relayed and the key purged, those
	// go too, and the metric counts them under label_intents.
	_, err = pool.Exec(ctx, `DELETE FROM label_intent_outbox; DELETE FROM idempotency_keys WHERE request_id = 'keyed-1'`)
	require.NoError(t, err)
	// And a reconciliation run past RECONCILE_RETENTION's default with the
	// lines it imported, a recent run, and an old tombstone.
	_, err = pool.Exec(ctx, `
		INSERT INTO reconcile_runs (started_at, finished_at, source, period, grace, stuck_after, lines_read, lines_new, labels, labels_in_grace, counts, amounts)
		SELECT now() - ago, now() - ago, 'invoice.csv', ARRAY[(now() - ago)::date], '6 hours', '1 hour', 3, 3, 0, 0, '{}', '{}'
		  FROM (VALUES (interval '91 days'), (interval '1 day')) v(ago);
		INSERT INTO invoice_lines (invoice_no, line_no, billed_at, carrier_label_id, tracking_no, idempotency_key, reference, cost_cents, currency, run_id)
		SELECT 'INV-1', i, now() - interval '122 days', 'CL-' || i, 'T' || i, '', '', 612, 'USD', 1 FROM generate_series(1, 3) i;
		INSERT INTO idempotency_tombstones (caller_id, key_hash, purged_at) VALUES ('c', sha256('old'), now() - interval '31 days')`)
	require.NoError(t, err)
	m := metrics.New(metrics.Worker)
	w := &jobs.SweepKeysWorker{Pool: pool, Batch: 300, Log: zerolog.Nop(), Metrics: m, IntentRetention: 60 * 24 * time.Hour}
	require.NoError(t, w.Work(ctx, &river.Job[jobs.SweepKeysArgs]{JobRow: &rivertype.JobRow{ID: 1, Kind: "sweep_keys"}}))
	require.Equal(t, 2.0, testutil.ToFloat64(m.SweeperDeletedRows.WithLabelValues("label_intents")))
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM label_intents WHERE request_id IN ('keyed-1', 'queued-1')`))
	require.Equal(t, 1.0, testutil.ToFloat64(m.SweeperDeletedRows.WithLabelValues("webhook_events")),
		"the event delivered 8 days ago is past the default WEBHOOK_EVENT_RETENTION (7 days)")
	require.Equal(t, []string{"hooked-1"}, dbtest.Scalar[[]string](t, pool, `SELECT array_agg(request_id) FROM webhook_events`),
		"a pending event stays, however old")
	for table, want := range map[string]float64{"reconcile_runs": 1, "invoice_lines": 3, "idempotency_tombstones": 1} {
		require.Equal(t, want, testutil.ToFloat64(m.SweeperDeletedRows.WithLabelValues(table)), table)
	}
	require.Equal(t, 1, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM reconcile_runs`),
		"the recent run stays")
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM invoice_lines`))
}

// Labels are kept unless LABEL_RETENTION is set; then a label older than it
// goes with its intent, in batches, once its key record is purged and its
// webhook event is not pending.
func TestSweepDeletesLabelsOnlyWithALabelRetention(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	insertIntents(t, ctx, pool, []intentSet{
		{"old", "succeeded", "200 days", 650},
		{"keyed", "succeeded", "200 days", 1},
		{"hooked", "succeeded", "200 days", 1},
		{"young", "succeeded", "100 days", 3},
	})
	_, err := pool.Exec(ctx, `
		INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, response_status, response_body, created_at, expires_at)
		VALUES ('c', 'keyed-key-1', decode(repeat('00', 32), 'hex'), 1, 'keyed-1', 'completed', 201, '{}', now(), now() + interval '1 hour');
		INSERT INTO webhook_events (request_id, caller_id, type, created_at, state)
		VALUES ('hooked-1', 'c', 'label_request.succeeded', now() - interval '200 days', 'pending')`)
	require.NoError(t, err)
	sweep := func(retention time.Duration) *metrics.Metrics {
		t.Helper()
		m := metrics.New(metrics.Worker)
		w := &jobs.SweepKeysWorker{Pool: pool, Batch: 300, Log: zerolog.Nop(), Metrics: m, LabelRetention: retention}
		require.NoError(t, w.Work(ctx, &river.Job[jobs.SweepKeysArgs]{JobRow: &rivertype.JobRow{ID: 1, Kind: "sweep_keys"}}))
		return m
	}
	prefixes := func(table string) []string {
		return dbtest.Scalar[[]string](t, pool, `SELECT array_agg(DISTINCT split_part(request_id, '-', 1) ORDER BY split_part(request_id, '-', 1)) FROM `+table)
	}

	m := sweep(0)
	require.Zero(t, testutil.ToFloat64(m.SweeperDeletedRows.WithLabelValues("labels")))
	require.Equal(t, 655, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM labels`), "no LABEL_RETENTION: every label stays")

	m = sweep(150 * 24 * time.Hour)
	require.Equal(t, 650.0, testutil.ToFloat64(m.SweeperDeletedRows.WithLabelValues("labels")))
	require.Equal(t, []string{"hooked", "keyed", "young"}, prefixes("labels"))
	require.Equal(t, []string{"hooked", "keyed", "young"}, prefixes("label_intents"), "each label went with its intent")
	require.Equal(t, 3, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM labels WHERE request_id LIKE 'young-%'`))
}

var sweepLabels = flag.Int("sweep-labels", 1_000_000, "BenchmarkSweepLabels: labels to fill and purge")

// BenchmarkSweepLabels measures LABEL_RETENTION's purge, the cheap path to
// drop old labels (docs/decisions.md, Labels: no partitions): a table of
// -sweep-labels labels with their succeeded intents, every one past the
// retention, purged by the sweep at the default SWEEP_BATCH. The baseline,
// in the same run, is what a partition per month would cost instead: the
// same rows copied into tables of their own (with the same indexes), then
// dropped.
//
//	go test -run '^$' -bench BenchmarkSweepLabels -benchtime 1x ./jobs/ -args -sweep-labels 1000000
func BenchmarkSweepLabels(b *testing.B) {
	ctx := context.Background()
	n := *sweepLabels
	for range b.N {
		b.StopTimer()
		pool, _ := dbtest.New(b)
		insertIntentSet(b, ctx, pool, "old", "succeeded", "200 days", n)
		_, err := pool.Exec(ctx, `
			CREATE TABLE labels_month (LIKE labels INCLUDING INDEXES);
			CREATE TABLE label_intents_month (LIKE label_intents INCLUDING INDEXES);
			INSERT INTO labels_month SELECT * FROM labels;
			INSERT INTO label_intents_month SELECT * FROM label_intents`)
		require.NoError(b, err)
		_, err = pool.Exec(ctx, `VACUUM ANALYZE labels, label_intents, labels_month, label_intents_month`)
		require.NoError(b, err)
		size := dbtest.Scalar[int64](b, pool, `SELECT pg_total_relation_size('labels') + pg_total_relation_size('label_intents')`)
		lsn := func() string { return dbtest.Scalar[string](b, pool, `SELECT pg_current_wal_lsn()::text`) }

		start, l0 := time.Now(), lsn()
		_, err = pool.Exec(ctx, `DROP TABLE labels_month, label_intents_month`)
		require.NoError(b, err)
		dropSecs, l1 := time.Since(start).Seconds(), lsn()
		dropWAL := dbtest.Scalar[int64](b, pool, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, l1, l0)

		m := metrics.New(metrics.Worker)
		w := &jobs.SweepKeysWorker{Pool: pool, Batch: 1000, Log: zerolog.Nop(), Metrics: m, LabelRetention: 150 * 24 * time.Hour}
		b.StartTimer()
		start, l0 = time.Now(), lsn()
		require.NoError(b, w.Work(ctx, &river.Job[jobs.SweepKeysArgs]{JobRow: &rivertype.JobRow{ID: 1, Kind: "sweep_keys"}}))
		secs, l1 := time.Since(start).Seconds(), lsn()
		b.StopTimer()
		require.Equal(b, float64(n), testutil.ToFloat64(m.SweeperDeletedRows.WithLabelValues("labels")))
		wal := dbtest.Scalar[int64](b, pool, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, l1, l0)
		b.ReportMetric(float64(n)/secs, "labels/s")
		b.ReportMetric(float64(wal)/float64(n), "WAL-B/label")
		b.ReportMetric(float64(size)/float64(n), "table-B/label")
		b.ReportMetric(dropSecs*1000, "drop-ms")
		b.ReportMetric(float64(dropWAL), "drop-WAL-B")
		b.ReportMetric(secs/dropSecs, "purge/drop")
	}
}

// Under postgres.AsOf the sweep reads the time given for the database's
// clock (the fill test's simulated hours): a key that expires in an hour is
// kept now and purged as of a day later, its tombstone dated then, and the
// tombstones' own retention counts from that time.
func TestSweepAsOf(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, response_status, response_body, created_at, expires_at)
		VALUES ('c', 'k', decode(repeat('00', 32), 'hex'), 1, 'r', 'completed', 201, '{}', now(), now() + interval '1 hour')`)
	require.NoError(t, err)
	n, err := jobs.Sweep(ctx, pool, 100, nil)
	require.NoError(t, err)
	require.Zero(t, n, "not expired by the database's clock")

	at := dbtest.Scalar[time.Time](t, pool, `SELECT now() + interval '1 day'`)
	n, err = jobs.Sweep(postgres.AsOf(ctx, at), pool, 100, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.True(t, at.Equal(dbtest.Scalar[time.Time](t, pool, `SELECT purged_at FROM idempotency_tombstones`)))

	n, err = jobs.SweepTombstones(postgres.AsOf(ctx, at.Add(time.Hour)), pool, 2*time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n, "an hour old as of then")
	n, err = jobs.SweepTombstones(postgres.AsOf(ctx, at.Add(3*time.Hour)), pool, 2*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
