package metrics

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// PoolCollector reads a process's database pool statistics
// ([pgxpool.Pool.Stat]) at scrape time: its connections by state, its size,
// and how often taking a connection had to wait. The API and every worker
// register one over their main pool, so unlike the database gauges these are
// per process: sum them across a fleet against max_connections.
type PoolCollector struct {
	pool *pgxpool.Pool

	conns, max, acquires, waits, waitSeconds, canceled *prometheus.Desc
}

// Pool connection states, the values of labels_db_pool_connections' state label.
const (
	PoolIdle         = "idle"
	PoolInUse        = "in_use"
	PoolConstructing = "constructing"
)

// NewPoolCollector returns a collector over pool.
func NewPoolCollector(pool *pgxpool.Pool) *PoolCollector {
	return &PoolCollector{
		pool:     pool,
		conns:    prometheus.NewDesc("labels_db_pool_connections", "Connections of the process's database pool, by state: idle, in_use, constructing (being opened).", []string{"state"}, nil),
		max:      prometheus.NewDesc("labels_db_pool_max_connections", "Most connections the process's database pool opens.", nil, nil),
		acquires: prometheus.NewDesc("labels_db_pool_acquires_total", "Connections taken from the process's database pool.", nil, nil),
		waits: prometheus.NewDesc("labels_db_pool_acquire_waits_total",
			"Connections taken from the process's database pool that had to wait: none was idle.", nil, nil),
		waitSeconds: prometheus.NewDesc("labels_db_pool_acquire_wait_seconds_total",
			"Time spent waiting for a connection of the process's database pool when none was idle.", nil, nil),
		canceled: prometheus.NewDesc("labels_db_pool_canceled_acquires_total",
			"Waits for a connection of the process's database pool that were given up (the request's context ended).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.max, c.acquires, c.waits, c.waitSeconds, c.canceled} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.IdleConns()), PoolIdle)
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.AcquiredConns()), PoolInUse)
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.ConstructingConns()), PoolConstructing)
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(c.acquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.waitSeconds, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds())
	ch <- prometheus.MustNewConstMetric(c.canceled, prometheus.CounterValue, float64(s.CanceledAcquireCount()))
}
