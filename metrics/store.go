package metrics

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Age buckets of labels_intents_pending_by_age, youngest first. The bounds
// are chosen for the alerts of docs/operations.md: under a minute is normal
// flow, minutes are carrier retries, beyond an hour is a stuck intent.
const (
	AgeUnder1m = "<1m"
	Age1mTo10m = "1m-10m"
	Age10mTo1h = "10m-1h"
	AgeOver1h  = ">1h"
)

// ageBucketSQL counts pending intents into the age buckets, in their order.
const ageBucketSQL = `count(*) FILTER (WHERE created_at > now() - interval '1 minute'),
		count(*) FILTER (WHERE created_at <= now() - interval '1 minute' AND created_at > now() - interval '10 minutes'),
		count(*) FILTER (WHERE created_at <= now() - interval '10 minutes' AND created_at > now() - interval '1 hour'),
		count(*) FILTER (WHERE created_at <= now() - interval '1 hour')`

// StoreCollector reads gauges from the database at scrape time: intents not
// yet final (count, count by age and age of the oldest), the outbox lag (age
// of the oldest undispatched intent), River's jobs by queue and state, and the
// counts of the latest reconciliation run. Every worker of a fleet reports the
// same values; aggregate them with max, not sum.
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
		jobs:          prometheus.NewDesc("labels_river_jobs", "River jobs by queue and state (completed, discarded and cancelled left out).", []string{"queue", "state"}, nil),
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
	var pending, under1m, to10m, to1h, over1h int64
	var oldest, lag float64
	// The pending counts use the partial index on pending intents, the lag the
	// first entry of the relay's queue: both stay small while the pipeline flows.
	err := c.pool.QueryRow(ctx, `
		WITH p AS (SELECT count(*) AS n,
		                  coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest,
		                  `+ageBucketSQL+`
		           FROM label_intents WHERE status = 'pending')
		SELECT p.*,
		       coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM label_intent_outbox), 0)::float8
		FROM p`).
		Scan(&pending, &oldest, &under1m, &to10m, &to1h, &over1h, &lag)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	for _, b := range []struct {
		age string
		n   int64
	}{{AgeUnder1m, under1m}, {Age1mTo10m, to10m}, {Age10mTo1h, to1h}, {AgeOver1h, over1h}} {
		ch <- prometheus.MustNewConstMetric(c.pendingByAge, prometheus.GaugeValue, float64(b.n), b.age)
	}
	ch <- prometheus.MustNewConstMetric(c.oldestPending, prometheus.GaugeValue, oldest)
	ch <- prometheus.MustNewConstMetric(c.outboxLag, prometheus.GaugeValue, lag)
	c.collectJobs(ctx, ch)
	c.collectReconcile(ctx, ch)
}

func (c *StoreCollector) collectJobs(ctx context.Context, ch chan<- prometheus.Metric) {
	rows, err := c.pool.Query(ctx, `SELECT queue, state::text, count(*) FROM river_job
		WHERE state NOT IN ('completed', 'discarded', 'cancelled') GROUP BY queue, state`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var q, s string
		var n int64
		if rows.Scan(&q, &s, &n) == nil {
			ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(n), q, s)
		}
	}
}

// collectReconcile reports the counts of the latest run. Reconciliation often
// runs as a short-lived command (the nightly CronJob) whose own counters are
// never scraped; its saved run is what every scrape can see.
func (c *StoreCollector) collectReconcile(ctx context.Context, ch chan<- prometheus.Metric) {
	var finished time.Time
	var raw []byte
	err := c.pool.QueryRow(ctx, `SELECT finished_at, counts FROM reconcile_runs ORDER BY finished_at DESC, run_id DESC LIMIT 1`).
		Scan(&finished, &raw)
	if err != nil {
		return // no run yet, or the table is not there
	}
	var counts map[string]float64
	if json.Unmarshal(raw, &counts) != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.reconcileFinished, prometheus.GaugeValue, float64(finished.UnixNano())/1e9)
	for category, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.reconcileItems, prometheus.GaugeValue, n, category)
	}
}
