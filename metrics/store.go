package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/labelkit/labels/postgres"
)

// Age buckets of labels_intents_pending_by_age, youngest first (the order of
// postgres.StoreStats.PendingByAge). The bounds
// are chosen for the alerts of docs/operations.md: under a minute is normal
// flow, minutes are carrier retries, beyond an hour is a stuck intent.
const (
	AgeUnder1m = "<1m"
	Age1mTo10m = "1m-10m"
	Age10mTo1h = "10m-1h"
	AgeOver1h  = ">1h"
)

// StoreCollector reads gauges from the database at scrape time, through
// [postgres.GetStoreStats]: intents not yet final (count, count by age and
// age of the oldest), the outbox lag (age of the oldest undispatched intent),
// River's jobs by queue and state, and the counts of the latest
// reconciliation run. Every worker of a fleet reports the same values;
// aggregate them with max, not sum.
type StoreCollector struct {
	pool *pgxpool.Pool

	pending, pendingByAge, oldestPending, outboxLag, jobs, up *prometheus.Desc
	reconcileItems, reconcileFinished                         *prometheus.Desc
}

// NewStoreCollector returns a collector over pool.
func NewStoreCollector(pool *pgxpool.Pool) *StoreCollector {
	return &StoreCollector{
		pool:          pool,
		pending:       prometheus.NewDesc("labels_intents_pending", "Accepted intents not yet final.", nil, nil),
		pendingByAge:  prometheus.NewDesc("labels_intents_pending_by_age", "Accepted intents not yet final, by age: <1m, 1m-10m, 10m-1h, >1h.", []string{"age"}, nil),
		oldestPending: prometheus.NewDesc("labels_intents_oldest_pending_seconds", "Age of the oldest intent not yet final.", nil, nil),
		outboxLag:     prometheus.NewDesc("labels_outbox_lag_seconds", "Age of the oldest intent the relay has not dispatched yet.", nil, nil),
		jobs:          prometheus.NewDesc("labels_river_jobs", "River jobs by queue and state (completed, discarded and cancelled left out; 0 for a state with none).", []string{"queue", "state"}, nil),
		up:            prometheus.NewDesc("labels_store_up", "1 when the scrape could read the database.", nil, nil),
		reconcileItems: prometheus.NewDesc("labels_reconcile_last_run_items",
			"Items of the latest reconciliation run, by category (matched included); read from the database, so runs of the reconcile command count too.", []string{"category"}, nil),
		reconcileFinished: prometheus.NewDesc("labels_reconcile_last_run_timestamp_seconds", "When the latest reconciliation run finished (Unix time).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.pendingByAge
	ch <- c.oldestPending
	ch <- c.outboxLag
	ch <- c.jobs
	ch <- c.up
	ch <- c.reconcileItems
	ch <- c.reconcileFinished
}

// Collect implements prometheus.Collector.
func (c *StoreCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := postgres.GetStoreStats(ctx, c.pool)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(st.Pending))
	for i, age := range []string{AgeUnder1m, Age1mTo10m, Age10mTo1h, AgeOver1h} {
		ch <- prometheus.MustNewConstMetric(c.pendingByAge, prometheus.GaugeValue, float64(st.PendingByAge[i]), age)
	}
	ch <- prometheus.MustNewConstMetric(c.oldestPending, prometheus.GaugeValue, st.OldestPending.Seconds())
	ch <- prometheus.MustNewConstMetric(c.outboxLag, prometheus.GaugeValue, st.OutboxLag.Seconds())
	for _, j := range st.Jobs {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(j.N), j.Queue, j.State)
	}
	// Reconciliation often runs as a short-lived command (the nightly
	// CronJob) whose own counters are never scraped; its saved run is what
	// every scrape can see.
	if r := st.LastRun; r != nil {
		ch <- prometheus.MustNewConstMetric(c.reconcileFinished, prometheus.GaugeValue, float64(r.FinishedAt.UnixNano())/1e9)
		for category, n := range r.Counts {
			ch <- prometheus.MustNewConstMetric(c.reconcileItems, prometheus.GaugeValue, n, category)
		}
	}
}
