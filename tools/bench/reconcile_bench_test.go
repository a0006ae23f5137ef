package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	labelkit "github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/reconcile"
)

// BenchmarkReconcile measures one nightly run: a synthetic invoice of
// RECONCILE_BENCH_LINES lines (default 1,000,000) from the carrier simulator,
// with a few billing errors of every kind, against a database holding the
// labels, intents and completed keys behind it. What is timed is
// reconcile.Run: reading the CSV, COPY, the matching, and saving the run and
// every item. It reports lines/s. It needs a database with a day of labels
// and the carrier's invoice for it (docs/reconcile.md, *How fast*):
//
//	go -C tools test ./bench -run '^$' -bench BenchmarkReconcile -benchtime 1x -timeout 60m
func BenchmarkReconcile(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("RECONCILE_BENCH_LINES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("RECONCILE_BENCH_LINES=%q: want a positive number", v)
		}
	}
	ctx := context.Background()
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	mix := sim.BillingMix{DuplicateLineRate: 0.002, AmountChangeRate: 0.002, ForeignLineRate: 0.001, CreditRate: 0.001}
	var csv bytes.Buffer
	truth, err := sim.WriteSyntheticInvoice(&csv, day, n, mix, 1)
	if err != nil {
		b.Fatal(err)
	}
	pool := benchDB(b, truth)

	want := truth.Matched + 3*truth.Credits + truth.Duplicates // lines in category matched
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Start from no invoice and no run; earlier runs' item tables go too.
		if _, err := pool.Exec(ctx, `
			DO $$ DECLARE t regclass; BEGIN
			  FOR t IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'reconcile_items'::regclass LOOP
			    EXECUTE 'DROP TABLE ' || t;
			  END LOOP;
			END $$;
			TRUNCATE invoice_lines, reconcile_runs`); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			b.Logf("no checkpoint before the run (%v): the run may pay for the seeding's", err)
		}
		b.StartTimer()
		began := time.Now()
		last, lastStep := began, "read"
		rep, err := reconcile.Run(ctx, pool, reconcile.Opts{
			ProgressFunc: func(p reconcile.Progress) {
				// With -v, how long each statement took.
				if step := p.Phase + " " + p.Step; p.Phase != "read" && step != lastStep {
					if testing.Verbose() {
						b.Logf("  %-40s %8s", lastStep, time.Since(last).Round(time.Millisecond))
					}
					last, lastStep = time.Now(), step
				}
			},
			Invoice:    bytes.NewReader(csv.Bytes()),
			Source:     "synthetic",
			Grace:      reconcile.DefaultGrace,
			StuckAfter: reconcile.DefaultStuckAfter,
			NowFunc:    func() time.Time { return day.AddDate(0, 0, 3) },
		})
		took := time.Since(began)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rep.LinesRead)/took.Seconds(), "lines/s")
		b.Logf("%d lines in %s: %.0f lines/s; counts %v", rep.LinesRead, took.Round(time.Millisecond), float64(rep.LinesRead)/took.Seconds(), rep.Counts)
		if rep.LinesRead != truth.Lines || rep.Counts[reconcile.Matched] != want ||
			rep.Counts[reconcile.DuplicateCharge] != truth.Duplicates ||
			rep.Counts[reconcile.AmountMismatch] != truth.AmountChanges ||
			rep.Counts[reconcile.BilledWithoutLabel] != truth.Foreign ||
			rep.Discrepancies() != truth.Duplicates+truth.AmountChanges+truth.Foreign {
			b.Fatalf("report disagrees with the simulator's truth %+v", truthCounts(truth))
		}
	}
}

// benchDB is a fresh database seeded with the truth's labels, or, when
// RECONCILE_BENCH_DATABASE_URL is set, that database, migrated and seeded
// once and kept, so that runs can be repeated without seeding again.
func benchDB(b *testing.B, truth sim.Truth) *pgxpool.Pool {
	ctx := context.Background()
	var pool *pgxpool.Pool
	if url := os.Getenv("RECONCILE_BENCH_DATABASE_URL"); url != "" {
		var err error
		if pool, err = pgxpool.New(ctx, url); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		if _, err := migrations.Apply(ctx, pool); err != nil {
			b.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM labels WHERE caller_id = $1`, sim.SyntheticCallerID).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n == len(truth.Labels) {
			return pool
		}
		if n > 0 {
			b.Fatalf("%s holds %d synthetic labels, not %d: use another database", url, n, len(truth.Labels))
		}
	} else {
		pool, _ = dbtest.New(b)
	}
	start := time.Now()
	seed(b, pool, truth)
	b.Logf("seeded %d labels with their intents and keys in %s", len(truth.Labels), time.Since(start).Round(time.Second))
	return pool
}

func truthCounts(t sim.Truth) string {
	t.Labels = nil
	return fmt.Sprintf("%+v", t)
}

// seed writes the labels behind a synthetic invoice as the worker would have:
// a succeeded intent, a completed key whose saved body names the label, and
// the label, created a second after the purchase.
func seed(b *testing.B, pool *pgxpool.Pool, truth sim.Truth) {
	ctx := context.Background()
	const batch = 100_000
	for lo := 0; lo < len(truth.Labels); lo += batch {
		part := truth.Labels[lo:min(lo+batch, len(truth.Labels))]
		var intents, labels, keys [][]any
		for i, t := range part {
			labelID := fmt.Sprintf("lbl_%010d", lo+i+1)
			created := t.PurchasedAt.Add(time.Second)
			accepted := t.PurchasedAt.Add(-time.Second)
			hash := sha256.Sum256([]byte(t.Reference))
			// The Label JSON of api.md, as the worker saves it (labels.Label.Body).
			body := labelkit.Label{LabelID: labelID, OrderID: t.OrderID, ParcelNo: t.ParcelNo, LabelVersion: 1, Service: t.Service,
				TrackingNo: t.TrackingNo, CarrierLabelID: t.CarrierLabelID, CostCents: t.CostCents, Currency: t.Currency, CreatedAt: created}.Body()
			intents = append(intents, []any{t.Reference, t.CallerID, t.CallerKey, hash[:], int16(1), t.OrderID,
				int32(t.ParcelNo), int32(1), `{}`, t.IdempotencyKey, "succeeded", labelID, accepted, created})
			labels = append(labels, []any{labelID, t.CallerID, t.Reference, t.OrderID, int32(t.ParcelNo), int32(1),
				t.Service, t.TrackingNo, t.CarrierLabelID, t.IdempotencyKey, t.CostCents, t.Currency, t.CallerKey,
				t.PurchasedAt, created})
			keys = append(keys, []any{t.CallerID, t.CallerKey, hash[:], int16(1), t.Reference, "completed",
				int32(201), string(body), accepted, created.Add(24 * time.Hour)})
		}
		err := copyTables(ctx, pool, copyTable{"label_intents", intentColumns, intents},
			copyTable{"labels", []string{"label_id", "caller_id", "request_id", "order_id", "parcel_no", "label_version", "service",
				"tracking_no", "carrier_label_id", "carrier_key", "cost_cents", "currency", "created_by_key", "purchased_at", "created_at"}, labels},
			copyTable{"idempotency_keys", keyColumns, keys})
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE label_intents, labels, idempotency_keys`); err != nil {
		b.Fatal(err)
	}
}
