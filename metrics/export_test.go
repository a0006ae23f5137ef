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
	for _, n := range api {
		require.False(t, slices.Contains(worker, n), "%s is exported by both", n)
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
