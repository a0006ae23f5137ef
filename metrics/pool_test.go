package metrics_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/metrics"
)

// poolSeries gathers a registry holding only a PoolCollector: each series by
// name and state.
func poolSeries(t *testing.T, r *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := r.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			if g := m.GetGauge(); g != nil {
				got[name] = g.GetValue()
			} else {
				got[name] = m.GetCounter().GetValue()
			}
		}
	}
	return got
}

// The pool gauges follow the pool: a connection taken is in_use, then idle;
// the first taker waits for the connection to open (a wait), the next finds it
// idle (none), and one whose context ended is counted as canceled.
func TestPoolCollector(t *testing.T) {
	t.Parallel()
	_, url := dbtest.New(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 1
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	r := prometheus.NewRegistry()
	r.MustRegister(metrics.NewPoolCollector(pool))
	problems, err := testutil.GatherAndLint(r)
	require.NoError(t, err)
	require.Empty(t, problems)

	require.Equal(t, map[string]float64{
		"labels_db_pool_connections{state=idle}": 0, "labels_db_pool_connections{state=in_use}": 0,
		"labels_db_pool_connections{state=constructing}": 0, "labels_db_pool_max_connections": 1,
		"labels_db_pool_acquires_total": 0, "labels_db_pool_acquire_waits_total": 0,
		"labels_db_pool_acquire_wait_seconds_total": 0, "labels_db_pool_canceled_acquires_total": 0,
	}, poolSeries(t, r))

	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	got := poolSeries(t, r)
	require.Equal(t, 1.0, got["labels_db_pool_connections{state=in_use}"])
	require.Equal(t, 0.0, got["labels_db_pool_connections{state=idle}"])
	require.Equal(t, 1.0, got["labels_db_pool_acquires_total"])
	require.Equal(t, 1.0, got["labels_db_pool_acquire_waits_total"], "the first acquire found no idle connection")

	held.Release()
	// The connection is idle now: taking it again does not wait.
	again, err := pool.Acquire(ctx)
	require.NoError(t, err)
	again.Release()
	// A taker whose context has ended gives up.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = pool.Acquire(canceled)
	require.ErrorIs(t, err, context.Canceled)

	got = poolSeries(t, r)
	require.Equal(t, 0.0, got["labels_db_pool_connections{state=in_use}"])
	require.Equal(t, 1.0, got["labels_db_pool_connections{state=idle}"])
	require.Equal(t, 2.0, got["labels_db_pool_acquires_total"])
	require.Equal(t, 1.0, got["labels_db_pool_acquire_waits_total"], "only the first waited (for the connection to open)")
	require.Equal(t, 1.0, got["labels_db_pool_canceled_acquires_total"])
	require.Greater(t, got["labels_db_pool_acquire_wait_seconds_total"], 0.0)
}
