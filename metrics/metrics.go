// Package metrics defines the Prometheus metrics of the label service in one
// place, so that every name, label and help text can be read together, and
// says which process exports each (Metrics.exports): the API registers the
// ones it updates, the worker its own, so neither exports series that stay 0.
package metrics

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Idempotency outcomes, the values of the outcome label of IdempotencyOutcomes.
const (
	OutcomeNew             = "new"
	OutcomeReplayed        = "replayed"
	OutcomeKeyReused       = "key_reused"
	OutcomeInProgress      = "in_progress"
	OutcomeDuplicate       = "duplicate_intent"
	OutcomeParcelLabelled  = "parcel_already_labelled"
	OutcomePurgedKeyReused = "purged_key_reused"
)

// outcomes are the values of IdempotencyOutcomes' outcome label, created at
// zero so that an alert on their rate has a series before the first event.
var outcomes = []string{OutcomeNew, OutcomeReplayed, OutcomeKeyReused, OutcomeInProgress,
	OutcomeDuplicate, OutcomeParcelLabelled, OutcomePurgedKeyReused}

// DiscrepancyCategories are the reconciliation categories other than matched
// (operations.md), the values of ReconcileDiscrepancies' category label.
var DiscrepancyCategories = []string{"billed_without_label", "duplicate_charge", "amount_mismatch",
	"label_not_billed", "key_without_label", "label_without_key", "stuck_intent", "carrier_id_conflict"}

// Process names a binary that exports metrics.
type Process string

// The processes that export metrics.
const (
	API    Process = "api"
	Worker Process = "worker"
)

// Metrics holds every collector. Each process creates it once with New,
// which registers only the collectors of that process; the others are still
// usable (an update is harmless) but not exported.
type Metrics struct {
	Registry *prometheus.Registry

	HTTPRequests        *prometheus.CounterVec   // route, method, status
	HTTPDuration        *prometheus.HistogramVec // route
	IdempotencyOutcomes *prometheus.CounterVec   // outcome
	WaitOutcomes        *prometheus.CounterVec   // result: WaitResults
	// Waiters is how many Prefer: wait requests the API holds now (at most
	// its PREFER_WAIT_MAX).
	Waiters prometheus.Gauge

	RelayDispatched   prometheus.Counter
	CarrierCalls      *prometheus.CounterVec   // outcome
	CarrierDuration   *prometheus.HistogramVec // outcome
	LeaseTakeovers    prometheus.Counter
	FencingRejections prometheus.Counter
	JobOutcomes       *prometheus.CounterVec // kind, outcome
	SweeperDeleted    prometheus.Counter
	// SweeperDeletedRows counts the other rows the sweep purged after their
	// retention, by table (jobs.RetainedTables).
	SweeperDeletedRows *prometheus.CounterVec // table

	// ReconcileDiscrepancies counts the items a reconciliation run reported in
	// a category other than matched; the reconcile job adds each run's counts.
	ReconcileDiscrepancies *prometheus.CounterVec // category

	// VoidOutcomes counts the voids the void job recorded, by outcome
	// (voided, window_closed, not_found, failed); VoidRecoveredCents adds the
	// charge of each label voided, by currency.
	VoidOutcomes       *prometheus.CounterVec // outcome
	VoidRecoveredCents *prometheus.CounterVec // currency
}

// WaitResults are the values of WaitOutcomes' result label: final (the
// outcome became final in time), timeout (it did not), capped (the API held
// as many waiting requests as it may and answered at once, without waiting).
var WaitResults = []string{"final", "timeout", "capped"}

// VoidOutcomes are the values of VoidOutcomes' outcome label.
// SweptTables are the table label's values of
// labels_sweeper_deleted_rows_total: the tables the sweep purges after the
// key records, in the order it sweeps them.
var SweptTables = []string{"idempotency_tombstones", "webhook_events", "label_intents", "reconcile_runs", "invoice_lines", "labels"}

var VoidOutcomes = []string{"voided", "window_closed", "not_found", "failed"}

// New returns a fresh set of metrics on a new registry that carries the Go
// and process collectors and the collectors of the given processes (a test
// that runs the API and a worker in one process passes both).
func New(processes ...Process) *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry:               r,
		HTTPRequests:           counterVec("labels_http_requests_total", "HTTP requests answered, by route, method and status.", "route", "method", "status"),
		HTTPDuration:           histogramVec("labels_http_request_duration_seconds", "HTTP request duration, by route.", []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "route"),
		IdempotencyOutcomes:    counterVec("labels_idempotency_outcomes_total", "POST /v1/labels outcomes: new, replayed, key_reused, in_progress, duplicate_intent (a new key for a parcel that has an intent), parcel_already_labelled; purged_key_reused (a key that arrived again after its record was purged) is counted besides the outcome.", "outcome"),
		WaitOutcomes:           counterVec("labels_prefer_wait_total", "Prefer: wait requests, by result: final (the outcome became final in time), timeout, capped (not held: the API held its most waiting requests).", "result"),
		Waiters:                gauge("labels_prefer_wait_waiters", "Prefer: wait requests held now, waiting for their outcome (at most PREFER_WAIT_MAX)."),
		RelayDispatched:        counter("labels_outbox_dispatched_total", "Intents the relay turned into River jobs."),
		CarrierCalls:           counterVec("labels_carrier_calls_total", "Carrier purchase calls, by outcome: bought, replayed, rejected, in_progress, unknown.", "outcome"),
		CarrierDuration:        histogramVec("labels_carrier_call_duration_seconds", "Carrier purchase call duration, by outcome.", []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30}, "outcome"),
		LeaseTakeovers:         counter("labels_lease_takeovers_total", "Attempts that took over a key whose previous lease had expired."),
		FencingRejections:      counter("labels_fencing_rejections_total", "Completions rolled back because the attempt had lost its lease."),
		JobOutcomes:            counterVec("labels_job_outcomes_total", "Job attempts, by kind and outcome.", "kind", "outcome"),
		SweeperDeleted:         counter("labels_sweeper_deleted_keys_total", "Completed key records purged after their retention."),
		SweeperDeletedRows:     counterVec("labels_sweeper_deleted_rows_total", "Rows the sweeper purged after their retention, by table: idempotency_tombstones, webhook_events, label_intents (failed; the succeeded go with their labels), reconcile_runs, invoice_lines, labels (only with LABEL_RETENTION).", "table"),
		ReconcileDiscrepancies: counterVec("labels_reconcile_discrepancies_total", "Items reconciliation runs reported as discrepancies, by category (every category but matched).", "category"),
		VoidOutcomes:           counterVec("labels_void_outcomes_total", "Voids of carrier labels the void job recorded (reconcile void), by outcome: voided, window_closed, not_found, failed.", "outcome"),
		VoidRecoveredCents:     counterVec("labels_void_recovered_cents_total", "Charges of the carrier labels voided (reconcile void), in cents, by currency.", "currency"),
	}
	for _, o := range outcomes {
		m.IdempotencyOutcomes.WithLabelValues(o)
	}
	for _, c := range DiscrepancyCategories {
		m.ReconcileDiscrepancies.WithLabelValues(c)
	}
	for _, o := range VoidOutcomes {
		m.VoidOutcomes.WithLabelValues(o)
	}
	for _, t := range SweptTables {
		m.SweeperDeletedRows.WithLabelValues(t)
	}
	for _, r := range WaitResults {
		m.WaitOutcomes.WithLabelValues(r)
	}
	for _, e := range m.exports() {
		for _, p := range processes {
			if e.by == p {
				r.MustRegister(e.c)
				break
			}
		}
	}
	return m
}

// export says which process exports one collector.
type export struct {
	c  prometheus.Collector
	by Process
}

// exports is the one table of which process exports what: one row per
// collector of Metrics (a test checks that none is left out). The database
// gauges (StoreCollector) are the worker's, registered where it serves
// /metrics.
func (m *Metrics) exports() []export {
	return []export{
		{m.HTTPRequests, API},
		{m.HTTPDuration, API},
		{m.IdempotencyOutcomes, API},
		{m.WaitOutcomes, API},
		{m.Waiters, API},

		{m.RelayDispatched, Worker},
		{m.CarrierCalls, Worker},
		{m.CarrierDuration, Worker},
		{m.LeaseTakeovers, Worker},
		{m.FencingRejections, Worker},
		{m.JobOutcomes, Worker},
		{m.SweeperDeleted, Worker},
		{m.SweeperDeletedRows, Worker},
		{m.ReconcileDiscrepancies, Worker},
		{m.VoidOutcomes, Worker},
		{m.VoidRecoveredCents, Worker},
	}
}

// collectorsOf returns the collectors whose metrics process p exports,
// besides Go's and the process's own: its rows of exports, the worker's
// database and webhook collectors ([NewStoreCollector], [NewWebhooks],
// [NewWebhookCollector]), and the pool collector ([NewPoolCollector]) both
// register. They are made over nothing: for their descriptions only.
func collectorsOf(p Process) []prometheus.Collector {
	var cs []prometheus.Collector
	for _, e := range New().exports() {
		if e.by == p {
			cs = append(cs, e.c)
		}
	}
	if p == Worker {
		w := NewWebhooks(nil)
		cs = append(cs, NewStoreCollector(nil), w.Deliveries, w.Attempts, w.AttemptDuration, w.EndpointsDisabled, w.Held, NewWebhookCollector(nil))
	}
	return append(cs, NewPoolCollector(nil))
}

// Names returns the names of the metrics process p exports, the database
// gauges of StoreCollector, the webhook metrics (NewWebhooks,
// NewWebhookCollector) and the pool's (NewPoolCollector) included.
func Names(p Process) []string {
	return descNames(collectorsOf(p)...)
}

// SharedNames returns the names of the metrics both processes export: their
// database pool's ([NewPoolCollector]).
func SharedNames() []string {
	return descNames(NewPoolCollector(nil))
}

// Series returns the names of the series process p exports: Names, with a
// histogram's name replaced by its _bucket, _sum and _count series.
func Series(p Process) []string {
	var series []string
	for _, c := range collectorsOf(p) {
		names := descNames(c)
		switch c.(type) {
		case prometheus.Histogram, *prometheus.HistogramVec:
			for _, n := range names {
				series = append(series, n+"_bucket", n+"_sum", n+"_count")
			}
		default:
			series = append(series, names...)
		}
	}
	return series
}

// descNames returns the metric names the collectors describe.
func descNames(cs ...prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		names = append(names, fqNameRE.FindStringSubmatch(d.String())[1])
	}
	return names
}

// fqNameRE finds a metric's name in a Desc's String (the only place the
// client library shows it).
var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// counter, counterVec, gauge, histogram and histogramVec make one collector
// from its name, its help and, for a vector, its label names.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}
