package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// StoreCollector reads gauges from the database at scrape time: intents not
// yet final (count and age of the oldest), the outbox lag (age of the oldest
// undispatched intent), and River's jobs by queue and state.
type StoreCollector struct {
	pool *pgxpool.Pool

	pending, oldestPending, outboxLag, jobs, up *prometheus.Desc
}

// NewStoreCollector returns a collector over pool.
func NewStoreCollector(pool *pgxpool.Pool) *StoreCollector {
	return &StoreCollector{
		pool:          pool,
		pending:       prometheus.NewDesc("labels_intents_pending", "Accepted intents not yet final.", nil, nil),
		oldestPending: prometheus.NewDesc("labels_intents_oldest_pending_seconds", "Age of the oldest intent not yet final.", nil, nil),
		outboxLag:     prometheus.NewDesc("labels_outbox_lag_seconds", "Age of the oldest intent the relay has not dispatched yet.", nil, nil),
		jobs:          prometheus.NewDesc("labels_river_jobs", "River jobs by queue and state (completed and discarded left out).", []string{"queue", "state"}, nil),
		up:            prometheus.NewDesc("labels_store_up", "1 when the scrape could read the database.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.oldestPending
	ch <- c.outboxLag
	ch <- c.jobs
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *StoreCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var pending int64
	var oldest, lag float64
	err := c.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM label_intents WHERE status = 'pending'),
		       coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM label_intents WHERE status = 'pending'), 0)::float8,
		       coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM label_intents WHERE dispatched_at IS NULL), 0)::float8`).
		Scan(&pending, &oldest, &lag)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.oldestPending, prometheus.GaugeValue, oldest)
	ch <- prometheus.MustNewConstMetric(c.outboxLag, prometheus.GaugeValue, lag)
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
