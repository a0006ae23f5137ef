package reconcile_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/reconcile"
)

// Runs older than the retention go with their items' partition and their
// void items, oldest first and one a call; a run with a void still waiting
// for its outcome stays, and so do recent runs and every void. While a run
// is in progress (the runs' lock held) nothing goes.
func TestPurgeRunKeepsWhatAVoidStillNeeds(t *testing.T) {
	t.Parallel()
	b, s := setupOneLabel(t)
	csv := invoice(s.line(1, at("09:00:00")))
	var ids [4]int64
	for i := range ids {
		ids[i] = b.run(t, csv).RunID
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.pool.Exec(b.ctx, sql, args...)
		require.NoError(t, err)
	}
	// Runs 0, 1 and 2 started 100 days ago (0 the oldest), run 3 10 days ago.
	for i, ago := range []string{"102 days", "101 days", "100 days", "10 days"} {
		exec(`UPDATE reconcile_runs SET started_at = now() - $2::interval WHERE run_id = $1`, ids[i], ago)
	}
	// Run 1 asked for a void that has no outcome yet; run 2 for one that was
	// answered.
	for i, cl := range map[int]string{1: "CL-waiting", 2: "CL-answered"} {
		exec(`INSERT INTO reconcile_voids (carrier_label_id, void_key, run_id, invoice_no, line_no, category, charge_cents, currency, requested_at)
			VALUES ($1, 'vk-' || $1, $2, 'INV-X', $3, 'duplicate_charge', 612, 'USD', now() - interval '100 days')`, cl, ids[i], i)
		exec(`INSERT INTO reconcile_void_items (run_id, invoice_no, line_no, carrier_label_id, requested_at)
			VALUES ($1, 'INV-X', $2, $3, now() - interval '100 days')`, ids[i], i, cl)
	}
	exec(`UPDATE reconcile_voids SET outcome = 'not_found', answered_at = now() WHERE carrier_label_id = 'CL-answered'`)
	items := func(run int64) int {
		return dbtest.Scalar[int](t, b.pool, `SELECT count(*) FROM reconcile_items WHERE run_id = $1`, run)
	}
	for _, id := range ids {
		require.Positive(t, items(id), "every run saved items")
	}

	// A run in progress holds the lock: the sweep leaves everything.
	lock, release := dbtest.HoldingSession(t, b.pool.Config().ConnString())
	_, err := lock.Exec(b.ctx, `SELECT pg_advisory_xact_lock($1)`, int64(reconcile.AdvisoryLockKey))
	require.NoError(t, err)
	id, err := reconcile.PurgeRun(b.ctx, b.pool, 90*24*time.Hour)
	require.NoError(t, err)
	require.Zero(t, id, "nothing goes while a run holds the lock")
	release()

	var purged []int64
	for {
		id, err := reconcile.PurgeRun(b.ctx, b.pool, 90*24*time.Hour)
		require.NoError(t, err)
		if id == 0 {
			break
		}
		purged = append(purged, id)
	}
	require.Equal(t, []int64{ids[0], ids[2]}, purged, "the old runs without a waiting void, oldest first")
	kept := dbtest.Scalar[[]int64](t, b.pool, `SELECT array_agg(run_id ORDER BY run_id) FROM reconcile_runs`)
	require.Equal(t, []int64{ids[1], ids[3]}, kept)
	require.Zero(t, dbtest.Scalar[int](t, b.pool, `SELECT count(*) FROM pg_tables WHERE tablename = ANY ($1)`,
		[]string{partition(ids[0]), partition(ids[2])}), "their partitions are dropped")
	require.Positive(t, items(ids[1]))
	require.Positive(t, items(ids[3]))
	require.Equal(t, []int64{ids[1]}, dbtest.Scalar[[]int64](t, b.pool, `SELECT array_agg(run_id) FROM reconcile_void_items`),
		"the void items of the purged run went")
	require.Equal(t, 2, dbtest.Scalar[int](t, b.pool, `SELECT count(*) FROM reconcile_voids`), "the voids stay: a label is voided once")

	// Once its void is answered, the waiting run goes too.
	exec(`UPDATE reconcile_voids SET outcome = 'voided', voided_at = now(), answered_at = now() WHERE carrier_label_id = 'CL-waiting'`)
	id, err = reconcile.PurgeRun(b.ctx, b.pool, 90*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, ids[1], id)
}

// Invoice lines go retention plus LineRetentionMargin after they were
// billed, in batches; the lines a void refers to and the void credits stay.
func TestPurgeInvoiceLines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	retention := 90 * 24 * time.Hour
	_, err := b.pool.Exec(b.ctx, `
		INSERT INTO invoice_lines (invoice_no, line_no, billed_at, carrier_label_id, tracking_no, idempotency_key, reference, cost_cents, currency, charge_type, run_id)
		SELECT 'INV-OLD', i, now() - interval '122 days', 'CL-' || i, 'T' || i, '', '', 612, 'USD',
		       CASE WHEN i = 3 THEN 'void_credit' ELSE '' END, 1
		  FROM generate_series(1, 750) i;
		INSERT INTO invoice_lines (invoice_no, line_no, billed_at, carrier_label_id, tracking_no, idempotency_key, reference, cost_cents, currency, run_id)
		SELECT 'INV-NEW', i, now() - interval '120 days', 'CL-N' || i, 'T' || i, '', '', 612, 'USD', 1
		  FROM generate_series(1, 10) i;
		INSERT INTO reconcile_voids (carrier_label_id, void_key, run_id, invoice_no, line_no, category, charge_cents, currency, requested_at)
		VALUES ('CL-1', 'vk-1', 1, 'INV-OLD', 1, 'duplicate_charge', 612, 'USD', now()),
		       ('CL-2', 'vk-2', 1, 'INV-OTHER', 9, 'duplicate_charge', 612, 'USD', now());
		INSERT INTO reconcile_void_items (run_id, invoice_no, line_no, carrier_label_id, requested_at)
		VALUES (2, 'INV-OLD', 2, 'CL-2', now())`)
	require.NoError(t, err)

	var total int64
	calls := 0
	for {
		n, err := reconcile.PurgeInvoiceLines(b.ctx, b.pool, retention, 200)
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(200))
		total += n
		calls++
		if n < 200 {
			break
		}
	}
	require.Equal(t, int64(747), total)
	require.Equal(t, 4, calls)
	left := dbtest.Scalar[[]string](t, b.pool, `SELECT array_agg(invoice_no || ':' || line_no ORDER BY invoice_no, line_no) FROM invoice_lines WHERE invoice_no = 'INV-OLD'`)
	require.Equal(t, []string{"INV-OLD:1", "INV-OLD:2", "INV-OLD:3"}, left, "the voided charges and the credit stay")
	require.Equal(t, 10, dbtest.Scalar[int](t, b.pool, `SELECT count(*) FROM invoice_lines WHERE invoice_no = 'INV-NEW'`),
		"lines billed within retention plus the margin stay")
}

func partition(run int64) string { return "reconcile_items_" + strconv.FormatInt(run, 10) }
