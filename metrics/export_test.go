package metrics

import (
	"reflect"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Every collector of Metrics has exactly one row in the table of exports, and
// New registers a row's collector for its process and for no other.
func TestEveryCollectorHasOneExporter(t *testing.T) {
	t.Parallel()
	m := New()
	rows := m.exports()
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Type().Field(i).Name == "Registry" {
			continue
		}
		n := 0
		for _, r := range rows {
			if r.c == c {
				n++
			}
		}
		require.Equal(t, 1, n, "Metrics.%s: one row in exports()", v.Type().Field(i).Name)
	}

	api, worker := Names(API), Names(Worker)
	require.Contains(t, api, "labels_http_requests_total")
	require.Contains(t, worker, "labels_carrier_calls_total")
	require.Contains(t, worker, "labels_store_up")
	shared := SharedNames()
	require.Contains(t, shared, "labels_db_pool_connections")
	for _, n := range api {
		require.Equal(t, slices.Contains(shared, n), slices.Contains(worker, n), "%s: exported by both exactly when it is the pool's", n)
	}
	for _, n := range shared {
		require.Contains(t, api, n)
		require.Contains(t, worker, n)
	}
	for _, p := range []Process{API, Worker} {
		reg := New(p).Registry
		ch := make(chan *prometheus.Desc, 64)
		go func() {
			for _, r := range New().exports() {
				r.c.Describe(ch)
			}
			close(ch)
		}()
		for d := range ch {
			name := fqNameRE.FindStringSubmatch(d.String())[1]
			// Registering a collector again fails exactly when the registry has it.
			err := reg.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "probe"}))
			registered := err != nil
			require.Equal(t, slices.Contains(Names(p), name), registered, "%s: registered in the %s registry", name, p)
		}
	}
}

// Series names a histogram's _bucket, _sum and _count series instead of its
// name, and every other metric by its name.
func TestSeriesNameHistogramSeries(t *testing.T) {
	t.Parallel()
	api, worker := Series(API), Series(Worker)
	for _, n := range []string{"labels_http_request_duration_seconds_bucket", "labels_http_request_duration_seconds_sum",
		"labels_http_request_duration_seconds_count", "labels_http_requests_total", "labels_db_pool_connections"} {
		require.Contains(t, api, n)
	}
	require.NotContains(t, api, "labels_http_request_duration_seconds")
	for _, n := range []string{"labels_carrier_call_duration_seconds_bucket", "labels_webhook_attempt_duration_seconds_count",
		"labels_store_up", "labels_db_pool_max_connections"} {
		require.Contains(t, worker, n)
	}
	require.NotContains(t, worker, "labels_webhook_attempt_duration_seconds")
	// The same names as the registries expose: every histogram observed once
	// and gathered shows exactly these series.
	for _, p := range []Process{API, Worker} {
		m := New(p)
		var r prometheus.Registerer // the worker's only
		if p == Worker {
			r = m.Registry
		}
		w := NewWebhooks(r)
		m.HTTPDuration.WithLabelValues("r").Observe(1)
		m.CarrierDuration.WithLabelValues("bought").Observe(1)
		w.AttemptDuration.Observe(1)
		mfs, err := m.Registry.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetType().String() != "HISTOGRAM" {
				continue
			}
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				require.Contains(t, Series(p), mf.GetName()+suffix, "%s", p)
			}
		}
	}
}
