package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/metrics"
)

// The worker's /metrics has the worker's series and none of the API's.
func TestWorkerExportsOnlyItsMetrics(t *testing.T) {
	t.Parallel()
	_, url := dbtest.New(t)
	e := env(map[string]string{"DATABASE_URL": url, "METRICS_ADDR": "127.0.0.1:0", "CARRIER_URL": "http://127.0.0.1:1"})
	ctx, cancel := context.WithCancel(context.Background())
	logs := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"worker"}, e, io.Discard, logs) }()
	addr := logs.WaitAddr(t, "metrics listening", 30*time.Second)

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	page := string(b)
	require.Contains(t, page, "\nlabels_store_up 1\n")
	require.Contains(t, page, `labels_void_outcomes_total{outcome="voided"} 0`)
	for _, n := range metrics.Names(metrics.API) {
		require.NotContains(t, page, "\n"+n, "the worker exports the API's %s", n)
	}

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code)
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not stop")
	}
}
