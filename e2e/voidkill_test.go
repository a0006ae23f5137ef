package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/testutil/proctest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/reconcile"
)

// holdingCarrier forwards every call to the carrier and, for voids, holds
// the carrier's answer back from the worker until the worker is gone: the
// carrier has voided the label, the worker never hears of it.
type holdingCarrier struct {
	next      http.Handler
	voided    chan struct{} // closed when the carrier has answered the first void
	once      sync.Once
	mu        sync.Mutex
	voidCalls int
}

func (h *holdingCarrier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/void") {
		h.next.ServeHTTP(w, r)
		return
	}
	h.mu.Lock()
	h.voidCalls++
	first := h.voidCalls == 1
	h.mu.Unlock()
	if !first {
		h.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	h.next.ServeHTTP(rec, r)
	h.once.Do(func() { close(h.voided) })
	// The answer never leaves: the worker is killed while it waits for it.
	<-r.Context().Done()
}

func (h *holdingCarrier) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.voidCalls
}

// A worker process killed with SIGKILL while its void call is in flight (the
// carrier voided the label, the answer never came back): River's rescuer
// hands the job to another worker process, which asks again under the same
// void key and gets the carrier's saved answer. The label is voided once, the
// outcome is recorded once, the label we hold is never touched, and the next
// reconciliation nets the credit against the charge.
func TestVoidSurvivesAKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for River's rescuer (up to a minute)")
	}
	t.Parallel()
	bins := proctest.BuildT(t, "./cmd/worker")
	s, kept := stacktest.NewDuplicate(t, stacktest.SimOpts{})
	s.StopWorker() // from here on, only the worker processes below run jobs
	rep := s.Reconcile()
	require.Equal(t, 1, rep.Counts[reconcile.DuplicateCharge], "%v", rep.Counts)

	target, err := url.Parse(s.CarrierURL)
	require.NoError(t, err)
	hold := &holdingCarrier{next: httputil.NewSingleHostReverseProxy(target), voided: make(chan struct{})}
	front := httptest.NewServer(hold)
	t.Cleanup(front.Close)

	// A short lease makes River's rescue come soon: the job is stuck after
	// lease + 15 s, and the rescuer looks every 30 s.
	f := proctest.Fleet(t, fleet.Config{Bins: bins, Env: map[string]string{
		"DATABASE_URL": s.Pool.Config().ConnString(), "CARRIER_URL": front.URL,
		"LEASE_DURATION": "3s", "CARRIER_TIMEOUT": "2s", "RETRY_BASE": "100ms", "RETRY_MAX": "1s",
	}})
	first, err := f.Start(t.Context(), fleet.Spec{Bin: "worker", Name: "worker-1"})
	require.NoError(t, err)

	inserter, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{})
	require.NoError(t, err)
	type result struct {
		rep *reconcile.VoidReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := reconcile.Void(context.Background(), s.Pool, reconcile.VoidOpts{
			RunID: rep.RunID, Enqueue: jobs.EnqueueVoids(inserter), Wait: 3 * time.Minute, PollInterval: 100 * time.Millisecond,
		})
		done <- result{r, err}
	}()

	select {
	case <-hold.voided:
	case <-time.After(time.Minute):
		t.Fatalf("the worker never asked for the void; its log:\n%s", first.Tail(20))
	}
	require.NoError(t, f.Kill(first))
	<-first.Done()
	require.Equal(t, int64(1), s.Sim.Stats().Voids, "the carrier voided the label; the killed worker never heard")

	second, err := f.Start(t.Context(), fleet.Spec{Bin: "worker", Name: "worker-2"})
	require.NoError(t, err)
	var res result
	select {
	case res = <-done:
	case <-time.After(4 * time.Minute):
		t.Fatalf("the void was never recorded; the second worker's log:\n%s", second.Tail(20))
	}
	require.NoError(t, res.err)
	require.Len(t, res.rep.Items, 1)
	it := res.rep.Items[0]
	require.Equal(t, reconcile.VoidVoided, it.Outcome, it.Detail)
	require.NotEqual(t, kept.CarrierLabelID, it.CarrierLabelID, "never the label we hold")
	require.Equal(t, 0, res.rep.ExitCode())

	st := s.Sim.Stats()
	require.Equal(t, int64(1), st.Voids, "voided once")
	require.GreaterOrEqual(t, st.VoidReplays, int64(1), "the second worker's call was answered from the void key")
	require.GreaterOrEqual(t, hold.calls(), 2)
	for _, p := range s.Sim.Purchases() {
		if p.CarrierLabelID == kept.CarrierLabelID {
			require.Nil(t, p.VoidedAt, "the label we hold is not voided")
		} else {
			require.NotNil(t, p.VoidedAt)
		}
	}
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM reconcile_voids WHERE outcome = 'voided'`))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM river_job WHERE kind = 'void_label'`), "one job per carrier label")

	next := s.Reconcile()
	require.Zero(t, next.Counts[reconcile.DuplicateCharge], "%v", next.Counts)
	require.Equal(t, 2, next.Counts[reconcile.Voided], "the charge and its credit")
	require.Zero(t, next.Discrepancies())
}
