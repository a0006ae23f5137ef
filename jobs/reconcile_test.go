package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/reconcile"
)

func TestReconcileSchedule(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	daily, err := jobs.ReconcileSchedule("daily@02:30")
	require.NoError(t, err)
	for _, tc := range []struct{ now, next string }{
		{"2026-12-02T01:00:00Z", "2026-12-02T02:30:00Z"},
		{"2026-12-02T02:30:00Z", "2026-12-03T02:30:00Z"}, // strictly after: not twice at 02:30
		{"2026-12-02T02:29:59Z", "2026-12-02T02:30:00Z"},
		{"2026-12-02T23:59:00Z", "2026-12-03T02:30:00Z"},
		{"2026-12-31T12:00:00Z", "2027-01-01T02:30:00Z"},
		{"2026-12-02T03:00:00+02:00", "2026-12-02T02:30:00Z"}, // 01:00 UTC: the time is UTC whatever the zone
	} {
		require.Equal(t, at(tc.next), daily.Next(at(tc.now)), "after %s", tc.now)
	}

	every, err := jobs.ReconcileSchedule("6h")
	require.NoError(t, err)
	require.Equal(t, at("2026-12-02T07:00:00Z"), every.Next(at("2026-12-02T01:00:00Z")))

	for _, bad := range []string{"", "daily", "daily@2:30", "daily@24:00", "daily@02:60", "daily@02-30", "hourly", "6", "30s", "-6h", "daily@ 02:30"} {
		_, err := jobs.ReconcileSchedule(bad)
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), fmt.Sprintf("reconcile schedule %q", bad))
	}
}

func TestReconcilePeriodicArgs(t *testing.T) {
	t.Parallel()
	construct := jobs.ReconcilePeriodicArgs(func() time.Time { return time.Date(2026, 12, 3, 0, 30, 0, 0, time.FixedZone("X", 3*3600)) })
	args, opts := construct()
	require.Nil(t, opts, "the args' own InsertOpts apply")
	require.Equal(t, jobs.ReconcileArgs{Day: "2026-12-01"}, args, "the day before, in UTC (the clock says 2026-12-02T21:30Z)")

	args, _ = jobs.ReconcilePeriodicArgsDaysBack(3, func() time.Time { return time.Date(2026, 12, 3, 0, 30, 0, 0, time.UTC) })()
	require.Equal(t, jobs.ReconcileArgs{Day: "2026-11-30"}, args)
}

// reconcileInvoicer is a carrier that serves the invoices of its map.
type reconcileInvoicer struct {
	mu       sync.Mutex
	invoices map[string]string
	asked    []string
}

func (c *reconcileInvoicer) Invoice(_ context.Context, day time.Time) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := day.Format(time.DateOnly)
	c.asked = append(c.asked, d)
	csv, ok := c.invoices[d]
	if !ok {
		return nil, errors.New("carrier unreachable")
	}
	return []byte(csv), nil
}

const reconcileHeader = "invoice_no,line_no,billed_at,carrier_label_id,tracking_no,idempotency_key,reference,cost_cents,currency\n"

// reconcileSeeded returns a pool on a fresh database with one label as the
// worker's completion leaves it, created at 10:00 on 2026-12-02.
func reconcileSeeded(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := dbtest.New(t)
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		for _, sql := range []string{
			`INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no,
			       label_version, payload, carrier_key, status, label_id, created_at, completed_at)
			 VALUES ('lr_1', 'fulfilment', 'label:1:1:v1', decode(repeat('00', 32), 'hex'), 1, 1, 1, 1, '{}', 'carrier:k1',
			       'succeeded', 'lbl_1', '2026-12-02T09:59:59Z', '2026-12-02T10:00:00Z')`,
			`INSERT INTO labels (label_id, caller_id, request_id, order_id, parcel_no, label_version, service, tracking_no,
			       carrier_label_id, carrier_key, cost_cents, currency, created_by_key, created_at)
			 VALUES ('lbl_1', 'fulfilment', 'lr_1', 1, 1, 1, 'ground', 'GRD000000001', 'CL-1', 'carrier:k1', 612, 'USD',
			       'label:1:1:v1', '2026-12-02T10:00:00Z')`,
			`INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state,
			       response_status, response_body, created_at, expires_at)
			 VALUES ('fulfilment', 'label:1:1:v1', decode(repeat('00', 32), 'hex'), 1, 'lr_1', 'completed', 201,
			       '{"label_id":"lbl_1"}', '2026-12-02T09:59:59Z', '2026-12-03T10:00:00Z')`,
		} {
			if _, err := tx.Exec(context.Background(), sql); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	return pool
}

func reconcileJob(day string) *river.Job[jobs.ReconcileArgs] {
	return &river.Job[jobs.ReconcileArgs]{JobRow: &rivertype.JobRow{ID: 1, Attempt: 1}, Args: jobs.ReconcileArgs{Day: day}}
}

// The worker reconciles the day it is given; discrepancies are a finished
// job, an unreachable carrier a retry, an unreadable invoice a cancellation.
func TestReconcileWorker(t *testing.T) {
	t.Parallel()
	pool := reconcileSeeded(t)
	ctx := context.Background()
	inv := &reconcileInvoicer{invoices: map[string]string{
		"2026-12-02": reconcileHeader +
			"INV-20261202,1,2026-12-02T10:00:00Z,CL-1,GRD000000001,carrier:k1,lr_1,612,USD\n" +
			"INV-20261202,2,2026-12-02T11:00:00Z,CL-F1,GRD9-X,,,845,USD\n",
		"2026-12-05": reconcileHeader + "INV-20261205,1,2026-12-05T10:00:00Z,CL-2,GRD2,,,oops,USD\n",
	}}
	var reports []*reconcile.Report
	w := &jobs.ReconcileWorker{
		Pool: pool, Carrier: inv, Log: zerolog.Nop(),
		NowFunc:    func() time.Time { return time.Date(2026, 12, 6, 2, 30, 0, 0, time.UTC) },
		ReportFunc: func(r *reconcile.Report) { reports = append(reports, r) },
	}

	require.NoError(t, w.Work(ctx, reconcileJob("2026-12-02")), "discrepancies do not fail the job")
	require.Len(t, reports, 1)
	require.Equal(t, 1, reports[0].Counts[reconcile.Matched])
	require.Equal(t, 1, reports[0].Counts[reconcile.BilledWithoutLabel])
	require.Equal(t, "carrier:2026-12-02", reports[0].Source)
	require.Equal(t, reconcile.DefaultGrace, reports[0].Grace)

	err := w.Work(ctx, reconcileJob("2026-12-04"))
	require.ErrorContains(t, err, "fetching the invoice of 2026-12-04: carrier unreachable")
	var cancel *river.JobCancelError
	require.False(t, errors.As(err, &cancel), "retried: the carrier may answer later")

	err = w.Work(ctx, reconcileJob(""))
	require.ErrorAs(t, err, &cancel, "an invoice that cannot be read is not retried")
	require.ErrorContains(t, err, "carrier:2026-12-05:2: cost_cents")
	require.Equal(t, "2026-12-05", inv.asked[len(inv.asked)-1], "no day: the day before the clock's")

	require.ErrorAs(t, w.Work(ctx, reconcileJob("yesterday")), &cancel)

	runs := dbtest.Scalar[int](t, pool, `SELECT count(*) FROM reconcile_runs`)
	require.Equal(t, 1, runs, "only the run that worked is saved")
}

// Through River: the periodic job's constructor names the previous day, and
// the worker reconciles it.
func TestReconcileThroughRiver(t *testing.T) {
	t.Parallel()
	pool := reconcileSeeded(t)
	ctx := context.Background()
	inv := &reconcileInvoicer{invoices: map[string]string{
		"2026-12-02": reconcileHeader + "INV-20261202,1,2026-12-02T10:00:00Z,CL-1,GRD000000001,carrier:k1,lr_1,612,USD\n",
	}}
	clock := func() time.Time { return time.Date(2026, 12, 3, 2, 30, 0, 0, time.UTC) }
	done := make(chan *reconcile.Report, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, &jobs.ReconcileWorker{Pool: pool, Carrier: inv, Log: zerolog.Nop(), NowFunc: clock,
		ReportFunc: func(r *reconcile.Report) { done <- r }})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers: workers,
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(time.Hour), jobs.ReconcilePeriodicArgs(clock), &river.PeriodicJobOpts{RunOnStart: true}),
		},
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.WithoutCancel(ctx)) })

	select {
	case rep := <-done:
		require.Equal(t, []string{"2026-12-02"}, rep.Period)
		require.Zero(t, rep.Discrepancies())
	case <-time.After(30 * time.Second):
		t.Fatal("the periodic reconcile job did not run")
	}
}
