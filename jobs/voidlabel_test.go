package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/reconcile"
)

// dupStack is a stack whose carrier sold our parcel twice, the label we
// hold, and the reconcile run that found the duplicate.
func dupStack(t *testing.T, o stacktest.SimOpts) (*stacktest.SimStack, *client.Label, int64) {
	t.Helper()
	s, label := stacktest.NewDuplicate(t, o)
	rep := s.Reconcile()
	require.Equal(t, 1, rep.Counts[reconcile.DuplicateCharge], "%v", rep.Counts)
	return s, label, rep.RunID
}

// voidRun voids the run's duplicates through River, as `reconcile void` does.
func voidRun(t *testing.T, s *stacktest.SimStack, runID int64) *reconcile.VoidReport {
	t.Helper()
	inserter, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{})
	require.NoError(t, err)
	rep, err := reconcile.Void(context.Background(), s.Pool, reconcile.VoidOpts{
		RunID: runID, Enqueue: jobs.EnqueueVoids(inserter), Wait: time.Minute, PollInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	return rep
}

// requireCounted waits until c reads want, and checks that it still does a
// moment later: the worker counts an outcome after its record commits, so a
// report can be read before the counter moves, and a second count would
// arrive right behind the first.
func requireCounted(t *testing.T, c prometheus.Collector, want float64) {
	t.Helper()
	require.Eventually(t, func() bool { return testutil.ToFloat64(c) == want }, time.Minute, 10*time.Millisecond,
		"the counter reads %v", want)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, want, testutil.ToFloat64(c))
}

// The duplicate is voided once although the first attempt dies between the
// carrier's answer and its record: the job runs again, and the carrier
// answers the same void key with a replay. The next reconciliation nets the
// credit against the charge; the label we hold is never touched.
func TestVoidLabelSurvivesACrashAfterTheCall(t *testing.T) {
	t.Parallel()
	var crashes atomic.Int32
	s, label, runID := dupStack(t, stacktest.SimOpts{AfterVoidFunc: func(context.Context, string) error {
		if crashes.Add(1) == 1 {
			return errors.New("the worker died here")
		}
		return nil
	}})

	rep := voidRun(t, s, runID)
	require.Len(t, rep.Items, 1)
	it := rep.Items[0]
	require.Equal(t, reconcile.VoidVoided, it.Outcome, it.Detail)
	require.NotEqual(t, label.CarrierLabelID, it.CarrierLabelID)
	require.Contains(t, it.Detail, "the carrier replayed the void")
	require.Equal(t, 0, rep.ExitCode())
	require.Equal(t, int32(2), crashes.Load(), "two attempts")

	st := s.Sim.Stats()
	require.Equal(t, int64(1), st.Voids, "voided once")
	require.Equal(t, int64(1), st.VoidReplays, "the second call was a replay")
	for _, p := range s.Sim.Purchases() {
		if p.CarrierLabelID == label.CarrierLabelID {
			require.Nil(t, p.VoidedAt, "the label we hold is not voided")
		} else {
			require.NotNil(t, p.VoidedAt)
		}
	}
	require.Equal(t, 2, s.Count(`SELECT attempts FROM reconcile_voids`))
	requireCounted(t, s.Metrics.VoidOutcomes.WithLabelValues("voided"), 1)
	requireCounted(t, s.Metrics.VoidRecoveredCents.WithLabelValues("USD"), float64(it.AmountCents))

	// A rerun asks for nothing more.
	again := voidRun(t, s, runID)
	require.Equal(t, reconcile.VoidVoided, again.Items[0].Outcome)
	require.Equal(t, int64(1), s.Sim.Stats().Voids)
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM river_job WHERE kind = 'void_label'`))

	next := s.Reconcile()
	require.Zero(t, next.Counts[reconcile.DuplicateCharge], "%v", next.Counts)
	require.Equal(t, 2, next.Counts[reconcile.Voided], "the charge and its credit")
	require.Equal(t, 1, next.Counts[reconcile.Matched])
	require.Zero(t, next.Discrepancies())
}

// Two voids of one run at once void each label once.
func TestVoidLabelTwiceAtOnce(t *testing.T) {
	t.Parallel()
	s, _, runID := dupStack(t, stacktest.SimOpts{})
	var wg sync.WaitGroup
	reps := make([]*reconcile.VoidReport, 2)
	for i := range reps {
		wg.Go(func() { reps[i] = voidRun(t, s, runID) })
	}
	wg.Wait()
	for _, rep := range reps {
		require.Equal(t, reconcile.VoidVoided, rep.Items[0].Outcome, rep.Items[0].Detail)
	}
	require.Equal(t, int64(1), s.Sim.Stats().Voids)
	requireCounted(t, s.Metrics.VoidOutcomes.WithLabelValues("voided"), 1)
}

// A label past the carrier's void window is window_closed, reported, and a
// rerun does not ask again.
func TestVoidLabelPastTheWindow(t *testing.T) {
	t.Parallel()
	s, _, runID := dupStack(t, stacktest.SimOpts{})
	s.Sim.Advance(sim.DefaultVoidWindow + time.Hour)
	rep := voidRun(t, s, runID)
	require.Equal(t, reconcile.VoidWindowClosed, rep.Items[0].Outcome)
	require.Contains(t, rep.Items[0].Detail, "more than 720h0m0s ago")
	require.Equal(t, 1, rep.ExitCode())
	require.Zero(t, s.Sim.Stats().Voids)
	requireCounted(t, s.Metrics.VoidOutcomes.WithLabelValues("window_closed"), 1)
	again := voidRun(t, s, runID)
	require.Equal(t, reconcile.VoidWindowClosed, again.Items[0].Outcome)
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM river_job WHERE kind = 'void_label'`), "final: not asked again")
}

// A carrier label the carrier does not know is not_found.
func TestVoidLabelNotFound(t *testing.T) {
	t.Parallel()
	s, _, runID := dupStack(t, stacktest.SimOpts{})
	var cl string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `
		SELECT il.carrier_label_id FROM reconcile_items i JOIN invoice_lines il USING (invoice_no, line_no)
		 WHERE i.run_id = $1 AND i.category = 'duplicate_charge'`, runID).Scan(&cl))
	require.NoError(t, s.Sim.Reset(), "the carrier forgets every label")
	rep := voidRun(t, s, runID)
	require.Equal(t, reconcile.VoidNotFound, rep.Items[0].Outcome)
	require.Equal(t, "no label "+cl, rep.Items[0].Detail)
	require.Equal(t, 1, rep.ExitCode())
}

// fakeVoider answers every void with err, or voids.
type fakeVoider struct {
	err   error
	calls atomic.Int32
}

func (f *fakeVoider) Void(_ context.Context, _, cl string) (*carrier.VoidedLabel, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	return &carrier.VoidedLabel{Label: carrier.Label{CarrierLabelID: cl}, Status: "voided", VoidedAt: time.Now()}, nil
}

// The job's own decisions, attempt by attempt: an unknown outcome is retried
// until MaxAttempts, then failed; a label of ours is refused without a call.
func TestVoidLabelWorkerDecisions(t *testing.T) {
	t.Parallel()
	s, label, runID := dupStack(t, stacktest.SimOpts{})
	ctx := context.Background()
	// The stack's workers must not take the job: ask for the void without one.
	rep, err := reconcile.Void(ctx, s.Pool, reconcile.VoidOpts{RunID: runID,
		Enqueue: func(context.Context, pgx.Tx, []string) error { return nil }})
	require.NoError(t, err)
	cl := rep.Items[0].CarrierLabelID
	job := func(attempt int) *river.Job[jobs.VoidLabelArgs] {
		return &river.Job[jobs.VoidLabelArgs]{JobRow: &rivertype.JobRow{ID: 1, Attempt: attempt}, Args: jobs.VoidLabelArgs{CarrierLabelID: cl}}
	}

	unknown := &fakeVoider{err: &carrier.UnknownOutcomeError{Status: 503, Err: errors.New("down")}}
	w := &jobs.VoidLabelWorker{Pool: s.Pool, Carrier: unknown, MaxAttempts: 2, Log: zerolog.Nop()}
	require.Error(t, w.Work(ctx, job(1)), "retried by River")
	require.NoError(t, w.Work(ctx, job(2)))
	require.Equal(t, int32(2), unknown.calls.Load())
	var outcome, detail string
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT outcome, detail FROM reconcile_voids WHERE carrier_label_id = $1`, cl).Scan(&outcome, &detail))
	require.Equal(t, reconcile.VoidFailed, outcome)
	require.Contains(t, detail, "no answer from the carrier through 2 attempts")
	require.NoError(t, w.Work(ctx, job(3)))
	require.Equal(t, int32(2), unknown.calls.Load(), "an answered void calls nobody")

	// Asked again, and meanwhile a label of ours came to hold the carrier
	// label: refused, and the carrier is not called.
	_, err = reconcile.Void(ctx, s.Pool, reconcile.VoidOpts{RunID: runID,
		Enqueue: func(context.Context, pgx.Tx, []string) error { return nil }})
	require.NoError(t, err)
	_, err = s.Pool.Exec(ctx, `UPDATE labels SET carrier_label_id = $1 WHERE label_id = $2`, cl, label.LabelID)
	require.NoError(t, err)
	ok := &fakeVoider{}
	w = &jobs.VoidLabelWorker{Pool: s.Pool, Carrier: ok, Log: zerolog.Nop()}
	require.NoError(t, w.Work(ctx, job(1)))
	require.Zero(t, ok.calls.Load())
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT outcome, detail FROM reconcile_voids WHERE carrier_label_id = $1`, cl).Scan(&outcome, &detail))
	require.Equal(t, reconcile.VoidFailed, outcome)
	require.Equal(t, fmt.Sprintf("refused: label %s holds %s", label.LabelID, cl), detail)

	// A refusal of the carrier is final.
	_, err = s.Pool.Exec(ctx, `UPDATE labels SET carrier_label_id = $1 WHERE label_id = $2`, label.CarrierLabelID, label.LabelID)
	require.NoError(t, err)
	_, err = reconcile.Void(ctx, s.Pool, reconcile.VoidOpts{RunID: runID,
		Enqueue: func(context.Context, pgx.Tx, []string) error { return nil }})
	require.NoError(t, err)
	refused := &fakeVoider{err: &carrier.RejectedError{Status: 422, Code: "idempotency_key_reused", Message: "other label", Op: "void"}}
	w = &jobs.VoidLabelWorker{Pool: s.Pool, Carrier: refused, Log: zerolog.Nop()}
	require.NoError(t, w.Work(ctx, job(1)))
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT outcome, detail FROM reconcile_voids WHERE carrier_label_id = $1`, cl).Scan(&outcome, &detail))
	require.Equal(t, reconcile.VoidFailed, outcome)
	require.Equal(t, "the carrier refused the void (422 idempotency_key_reused): other label", detail)
}
