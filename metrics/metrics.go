// Package metrics defines the Prometheus metrics of the label service in one
// place, so that every name, label and help text can be read together and the
// API and the worker register exactly the ones they update.
package metrics

import (
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
	"label_not_billed", "key_without_label", "label_without_key", "stuck_intent"}

// Metrics holds every collector; a process registers it once.
type Metrics struct {
	Registry *prometheus.Registry

	HTTPRequests        *prometheus.CounterVec   // route, status
	HTTPDuration        *prometheus.HistogramVec // route
	IdempotencyOutcomes *prometheus.CounterVec   // outcome
	WaitOutcomes        *prometheus.CounterVec   // final|timeout

	RelayDispatched   prometheus.Counter
	CarrierCalls      *prometheus.CounterVec   // outcome
	CarrierDuration   *prometheus.HistogramVec // outcome
	LeaseTakeovers    prometheus.Counter
	FencingRejections prometheus.Counter
	JobOutcomes       *prometheus.CounterVec // kind, outcome
	SweeperDeleted    prometheus.Counter

	// ReconcileDiscrepancies counts the items a reconciliation run reported in
	// a category other than matched; the reconcile job adds each run's counts.
	ReconcileDiscrepancies *prometheus.CounterVec // category

	// VoidOutcomes counts the voids the void job recorded, by outcome
	// (voided, window_closed, not_found, failed); VoidRecoveredCents adds the
	// charge of each label voided, by currency.
	VoidOutcomes       *prometheus.CounterVec // outcome
	VoidRecoveredCents *prometheus.CounterVec // currency
}

// VoidOutcomes are the values of VoidOutcomes' outcome label.
var VoidOutcomes = []string{"voided", "window_closed", "not_found", "failed"}

// New returns a fresh set of metrics on a new registry that also carries the Go
// and process collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "labels_http_requests_total", Help: "HTTP requests answered, by route and status.",
		}, []string{"route", "status"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "labels_http_request_duration_seconds", Help: "HTTP request duration, by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		IdempotencyOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "labels_idempotency_outcomes_total", Help: "POST /v1/labels outcomes: new, replayed, key_reused, in_progress, duplicate_intent (a new key for a parcel that has an intent), parcel_already_labelled; purged_key_reused (a key that arrived again after its record was purged) is counted besides the outcome.",
		}, []string{"outcome"}),
		WaitOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "labels_prefer_wait_total", Help: "Prefer: wait requests, by whether the outcome became final in time.",
		}, []string{"result"}),
		RelayDispatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "labels_outbox_dispatched_total", Help: "Intents the relay turned into River jobs.",
		}),
		CarrierCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "labels_carrier_calls_total", Help: "Carrier purchase calls, by outcome: bought, replayed, rejected, in_progress, unknown.",
		}, []string{"outcome"}),
		CarrierDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "labels_carrier_call_duration_seconds", Help: "Carrier purchase call duration, by outcome.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30},
		}, []string{"outcome"}),
		LeaseTakeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "labels_lease_takeovers_total", Help: "Attempts that took over a key whose previous lease had expired.",
		}),
		FencingRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "labels_fencing_rejections_total", Help: "Completions rolled back because the attempt had lost its lease.",
		}),
		JobOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "labels_job_outcomes_total", Help: "Job attempts, by kind and outcome.",
		}, []string{"kind", "outcome"}),
		SweeperDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "labels_sweeper_deleted_keys_total", Help: "Completed key records purged after their retention.",
		}),
		ReconcileDiscrepancies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "labels_reconcile_discrepancies_total", Help: "Items reconciliation runs reported as discrepancies, by category (every category but matched).",
		}, []string{"category"}),
		VoidOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "labels_void_outcomes_total", Help: "Voids of carrier labels the void job recorded (reconcile void), by outcome: voided, window_closed, not_found, failed.",
		}, []string{"outcome"}),
		VoidRecoveredCents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "labels_void_recovered_cents_total", Help: "Charges of the carrier labels voided (reconcile void), in cents, by currency.",
		}, []string{"currency"}),
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
	r.MustRegister(m.HTTPRequests, m.HTTPDuration, m.IdempotencyOutcomes, m.WaitOutcomes, m.RelayDispatched,
		m.CarrierCalls, m.CarrierDuration, m.LeaseTakeovers, m.FencingRejections, m.JobOutcomes, m.SweeperDeleted,
		m.ReconcileDiscrepancies, m.VoidOutcomes, m.VoidRecoveredCents)
	return m
}
