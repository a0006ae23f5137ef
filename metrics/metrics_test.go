package metrics_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/reconcile"
)

// sample finds the series name{labels} among what g exposes. Labels are
// name, value pairs and must match the series' labels exactly.
func sample(t *testing.T, g prometheus.Gatherer, name string, labels ...string) (*dto.Metric, bool) {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if reflect.DeepEqual(got, want) {
				return m, true
			}
		}
	}
	return nil, false
}

// value returns the value of a counter or gauge series, or the number of
// observations of a histogram series; 0 when the series does not exist.
func value(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m, ok := sample(t, g, name, labels...)
	switch {
	case !ok:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("%s: unexpected metric type", name)
	return 0
}

// eventually waits for a series to reach want: the worker counts an attempt
// right after its transaction commits, so a client can see the outcome first.
func eventually(t *testing.T, g prometheus.Gatherer, want float64, name string, labels ...string) {
	t.Helper()
	require.Eventually(t, func() bool { return value(t, g, name, labels...) == want }, 30*time.Second, 10*time.Millisecond,
		"%s%v: want %v, have %v", name, labels, want, value(t, g, name, labels...))
}

// The names of every metric before this change, which dashboards and alerts
// use: a rename or a removal breaks them, so a name may only be added.
var stableNames = []string{
	"labels_http_requests_total",
	"labels_http_request_duration_seconds",
	"labels_idempotency_outcomes_total",
	"labels_prefer_wait_total",
	"labels_outbox_dispatched_total",
	"labels_carrier_calls_total",
	"labels_carrier_call_duration_seconds",
	"labels_lease_takeovers_total",
	"labels_fencing_rejections_total",
	"labels_job_outcomes_total",
	"labels_sweeper_deleted_keys_total",
	"labels_intents_pending",
	"labels_intents_oldest_pending_seconds",
	"labels_outbox_lag_seconds",
	"labels_river_jobs",
	"labels_store_up",
}

func TestMetricNamesAreStable(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.API, metrics.Worker)
	names := slices.Concat(metrics.Names(metrics.API), metrics.Names(metrics.Worker))
	for _, n := range stableNames {
		require.Contains(t, names, n)
	}
	for _, n := range []string{"labels_intents_pending_by_age", "labels_reconcile_discrepancies_total",
		"labels_reconcile_last_run_items", "labels_reconcile_last_run_timestamp_seconds"} {
		require.Contains(t, names, n)
	}
	// Names, units and help texts follow Prometheus' conventions.
	problems, err := testutil.GatherAndLint(m.Registry)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// Every idempotency outcome and every discrepancy category has a series from
// the start, so that rate() and increase() see the first event.
func TestOutcomeAndCategorySeriesStartAtZero(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.API, metrics.Worker)
	for _, o := range []string{metrics.OutcomeNew, metrics.OutcomeReplayed, metrics.OutcomeKeyReused, metrics.OutcomeInProgress,
		metrics.OutcomeDuplicate, metrics.OutcomeParcelLabelled, metrics.OutcomePurgedKeyReused} {
		_, ok := sample(t, m.Registry, "labels_idempotency_outcomes_total", "outcome", o)
		require.True(t, ok, o)
	}
	var discrepancies []string
	for _, c := range reconcile.Categories {
		if reconcile.IsDiscrepancy(c) {
			discrepancies = append(discrepancies, c)
		}
	}
	require.Equal(t, discrepancies, metrics.DiscrepancyCategories, "every discrepancy category of reconcile, in report order")
	for _, c := range metrics.DiscrepancyCategories {
		_, ok := sample(t, m.Registry, "labels_reconcile_discrepancies_total", "category", c)
		require.True(t, ok, c)
	}
	m.ReconcileDiscrepancies.WithLabelValues("duplicate_charge").Add(3)
	require.Equal(t, 3.0, testutil.ToFloat64(m.ReconcileDiscrepancies.WithLabelValues("duplicate_charge")))
	require.Equal(t, 3.0, value(t, m.Registry, "labels_reconcile_discrepancies_total", "category", "duplicate_charge"))
	require.Equal(t, 0.0, value(t, m.Registry, "labels_reconcile_discrepancies_total", "category", "stuck_intent"))
}

func TestHTTPRequestsByRouteStatusAndDuration(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	g := s.Metrics.Registry

	lr := s.Accept(tok, "k-http", stacktest.ParcelBody(1, 1, 100))
	require.Equal(t, http.StatusUnauthorized, s.Create("", "k-http", stacktest.ParcelBody(1, 1, 100)).Status)
	require.Equal(t, http.StatusOK, s.Do(http.MethodGet, "/v1/label-requests/"+lr.ID, tok, nil).Status)
	require.Equal(t, http.StatusNotFound, s.Do(http.MethodGet, "/v1/label-requests/lr_nope", tok, nil).Status)

	require.Equal(t, 1.0, value(t, g, "labels_http_requests_total", "route", "create_label", "method", "POST", "status", "202"))
	require.Equal(t, 1.0, value(t, g, "labels_http_requests_total", "route", "create_label", "method", "POST", "status", "401"))
	require.Equal(t, 1.0, value(t, g, "labels_http_requests_total", "route", "get_label_request", "method", "GET", "status", "200"))
	require.Equal(t, 1.0, value(t, g, "labels_http_requests_total", "route", "get_label_request", "method", "GET", "status", "404"))
	require.Equal(t, 2.0, value(t, g, "labels_http_request_duration_seconds", "route", "create_label"))
	require.Equal(t, 2.0, value(t, g, "labels_http_request_duration_seconds", "route", "get_label_request"))
	h, _ := sample(t, g, "labels_http_request_duration_seconds", "route", "create_label")
	require.Positive(t, h.Histogram.GetSampleSum())
}

// Each answer of POST /v1/labels moves its own outcome and no other.
func TestIdempotencyOutcomes(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true, ClaimWait: 200 * time.Millisecond})
	tok := s.Token("fulfilment")
	g := s.Metrics.Registry
	counts := map[string]float64{}
	step := func(outcome string, status int, key string, body []byte) {
		t.Helper()
		r := s.Create(tok, key, body)
		require.Equal(t, status, r.Status, string(r.Body))
		counts[outcome]++
		for _, o := range []string{metrics.OutcomeNew, metrics.OutcomeReplayed, metrics.OutcomeKeyReused, metrics.OutcomeInProgress,
			metrics.OutcomeDuplicate, metrics.OutcomeParcelLabelled, metrics.OutcomePurgedKeyReused} {
			require.Equal(t, counts[o], value(t, g, "labels_idempotency_outcomes_total", "outcome", o), "after %s: outcome %s", outcome, o)
		}
	}
	body := stacktest.ParcelBody(5, 1, 100)
	step(metrics.OutcomeNew, http.StatusAccepted, "k-1", body)
	step(metrics.OutcomeReplayed, http.StatusAccepted, "k-1", body)
	step(metrics.OutcomeKeyReused, http.StatusUnprocessableEntity, "k-1", stacktest.ParcelBody(5, 1, 200))
	step(metrics.OutcomeDuplicate, http.StatusAccepted, "k-2", body)
	step(metrics.OutcomeParcelLabelled, http.StatusConflict, "k-3", stacktest.ParcelBody(5, 1, 300))

	// A concurrent request holds the key's claim beyond the bounded wait.
	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, created_at, expires_at)
		VALUES ('fulfilment', 'k-busy', decode(repeat('00', 32), 'hex'), 1, 'lr_x', now(), now())`)
	require.NoError(t, err)
	step(metrics.OutcomeInProgress, http.StatusConflict, "k-busy", stacktest.ParcelBody(6, 1, 100))
}

// The sweeper's deletions are counted, and a key that arrives again after
// its record was purged is counted as purged_key_reused.
func TestSweeperDeletionsAndPurgedKeyReused(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	tok := s.Token("fulfilment")
	g := s.Metrics.Registry
	body := stacktest.ParcelBody(918273, 1, 1450)
	for i, key := range []string{"label:918273:1:v1", "label:918273:2:v1"} {
		lr := s.Accept(tok, key, stacktest.ParcelBody(918273, i+1, 1450))
		s.WaitFinal(tok, lr.ID)
	}

	// The retention passes, by the database's clock (the one the sweeper reads).
	_, err := s.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	sweeper := &jobs.SweepKeysWorker{Pool: s.Pool, Batch: 1, Metrics: s.Metrics, Log: zerolog.Nop()}
	require.Equal(t, 0.0, value(t, g, "labels_sweeper_deleted_keys_total"))
	require.NoError(t, sweeper.Work(context.Background(), &river.Job[jobs.SweepKeysArgs]{}))
	require.Equal(t, 2.0, value(t, g, "labels_sweeper_deleted_keys_total"))
	require.NoError(t, sweeper.Work(context.Background(), &river.Job[jobs.SweepKeysArgs]{}))
	require.Equal(t, 2.0, value(t, g, "labels_sweeper_deleted_keys_total"), "nothing left to purge")

	require.Equal(t, 0.0, value(t, g, "labels_idempotency_outcomes_total", "outcome", metrics.OutcomePurgedKeyReused))
	require.Equal(t, http.StatusCreated, s.Create(tok, "label:918273:1:v1", body).Status)
	require.Equal(t, 1.0, value(t, g, "labels_idempotency_outcomes_total", "outcome", metrics.OutcomePurgedKeyReused))
}

// Carrier calls are counted and timed by outcome, and job attempts by kind
// and outcome: a lost reply (unknown, then replayed) and a rejection.
func TestCarrierCallsAndJobOutcomes(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	lostKey, rejectedKey := carrier.DeriveKey("fulfilment", "k-lost"), carrier.DeriveKey("fulfilment", "k-reject")
	var dropped atomic.Bool
	s.Carrier.Script = func(_ int, key string) string {
		switch {
		case key == rejectedKey:
			return "reject"
		case key == lostKey && dropped.CompareAndSwap(false, true):
			return "drop"
		}
		return ""
	}
	tok := s.Token("fulfilment")
	g := s.Metrics.Registry

	lost := s.Accept(tok, "k-lost", stacktest.ParcelBody(20, 1, 100))
	require.Equal(t, `"succeeded"`, status(t, s.WaitFinal(tok, lost.ID).Body))
	eventually(t, g, 1, "labels_job_outcomes_total", "kind", "buy_label", "outcome", "carrier_unknown")
	eventually(t, g, 1, "labels_job_outcomes_total", "kind", "buy_label", "outcome", "succeeded")
	require.Equal(t, 1.0, value(t, g, "labels_carrier_calls_total", "outcome", "unknown"))
	require.Equal(t, 1.0, value(t, g, "labels_carrier_calls_total", "outcome", "replayed"))
	require.Equal(t, 1.0, value(t, g, "labels_carrier_call_duration_seconds", "outcome", "unknown"))
	require.Equal(t, 1.0, value(t, g, "labels_carrier_call_duration_seconds", "outcome", "replayed"))

	rejected := s.Accept(tok, "k-reject", stacktest.ParcelBody(21, 1, 100))
	require.Equal(t, `"failed"`, status(t, s.WaitFinal(tok, rejected.ID).Body))
	eventually(t, g, 1, "labels_job_outcomes_total", "kind", "buy_label", "outcome", "failed_carrier_rejected")
	require.Equal(t, 1.0, value(t, g, "labels_carrier_calls_total", "outcome", "rejected"))
	require.Equal(t, 1.0, value(t, g, "labels_carrier_call_duration_seconds", "outcome", "rejected"))
	require.Equal(t, 0.0, value(t, g, "labels_carrier_calls_total", "outcome", "bought"), "the lost reply was the only purchase")
}

func status(t *testing.T, body []byte) string {
	t.Helper()
	var v struct {
		Status json.RawMessage `json:"status"`
	}
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return string(v.Status)
}

// A stalled attempt loses its lease: the next attempt counts a takeover, and
// the stalled one, when it resumes, a fencing rejection. The stall ends when
// the test releases it, never by the carrier timeout (which would end it as
// an unknown outcome instead).
func TestLeaseTakeoverAndFencingRejection(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{LeaseDuration: 2 * time.Minute, CarrierTimeout: time.Minute})
	stalled := s.Carrier.StallFirst(1)
	tok := s.Token("fulfilment")
	g := s.Metrics.Registry
	lr := s.Accept(tok, "k-fence", stacktest.ParcelBody(30, 1, 100))
	require.Eventually(t, stalled, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 0.0, value(t, g, "labels_lease_takeovers_total"))

	// The lease runs out and River hands the job to a new attempt.
	s.TakeOver(lr.ID)
	s.WaitFinal(tok, lr.ID)
	require.Equal(t, 1.0, value(t, g, "labels_lease_takeovers_total"))
	require.Equal(t, 0.0, value(t, g, "labels_fencing_rejections_total"))

	close(s.Carrier.Release)
	eventually(t, g, 1, "labels_fencing_rejections_total")
	eventually(t, g, 1, "labels_job_outcomes_total", "kind", "buy_label", "outcome", "fenced")
}
