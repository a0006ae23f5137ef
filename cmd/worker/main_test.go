package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/metrics"
)

func TestHelpAndBadConfig(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"worker", "--help"}, clitest.Env(nil), &out, io.Discard))
	require.Contains(t, out.String(), "LEASE_DURATION")

	cases := []struct {
		env  map[string]string
		want string
	}{
		// A carrier call that can outlive its lease is refused at start.
		{map[string]string{"CARRIER_TIMEOUT": "30s"}, "must be below LEASE_DURATION"},
		{map[string]string{"CARRIER_TIMEOUT": "40s", "LEASE_DURATION": "30s"}, "must be below LEASE_DURATION"},
		{map[string]string{"LEASE_DURATION": "a while"}, "LEASE_DURATION"},
		{map[string]string{"WORKER_CONCURRENCY": "0"}, "WORKER_CONCURRENCY"},
		{map[string]string{"RELAY_BACKLOG": "-2"}, "RELAY_BACKLOG"},
		{map[string]string{"RELAY_BACKLOG": "some"}, "RELAY_BACKLOG"},
		{map[string]string{"MAX_ATTEMPTS": "many"}, "MAX_ATTEMPTS"},
		{map[string]string{"RETRY_BASE": "2h"}, "RETRY_BASE"},
		{map[string]string{"RETRY_MAX": "500ms"}, "RETRY_MAX"},
		{map[string]string{"RETRY_MAX": "later"}, "RETRY_MAX"},
		{map[string]string{"SWEEP_INTERVAL": "0s"}, "SWEEP_INTERVAL"},
		{map[string]string{"WEBHOOK_TIMEOUT": "0s"}, "WEBHOOK_TIMEOUT"},
		{map[string]string{"WEBHOOK_RETRY_BASE": "11h"}, "WEBHOOK_RETRY_BASE"},
		{map[string]string{"WEBHOOK_MAX_ATTEMPTS": "0"}, "WEBHOOK_MAX_ATTEMPTS"},
		{map[string]string{"WEBHOOK_DISABLE_AFTER": "never"}, "WEBHOOK_DISABLE_AFTER"},
		{map[string]string{"WEBHOOK_CONCURRENCY": "0"}, "WEBHOOK_CONCURRENCY"},
		{map[string]string{"WEBHOOK_ALLOW_PRIVATE": "perhaps"}, "WEBHOOK_ALLOW_PRIVATE"},
		{map[string]string{"WEBHOOK_SECRET_KEY": "not base64 of 32 bytes"}, "WEBHOOK_SECRET_KEY"},
		{map[string]string{"WEBHOOK_SECRET_KEY_OLD": "not base64 of 32 bytes"}, "WEBHOOK_SECRET_KEY_OLD"},
		{map[string]string{"WEBHOOK_SECRET_KEY_OLD": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}, "WEBHOOK_SECRET_KEY_OLD is set without WEBHOOK_SECRET_KEY"},
		{map[string]string{"WEBHOOK_ALLOW_UNSEALED": "perhaps"}, "WEBHOOK_ALLOW_UNSEALED"},
		{map[string]string{"SWEEP_INTERVAL": "often"}, "SWEEP_INTERVAL"},
		{map[string]string{"KEY_RETENTION": "0s"}, "KEY_RETENTION"},
		{map[string]string{"SWEEP_BATCH": "-5"}, "SWEEP_BATCH"},
		{map[string]string{"WEBHOOK_EVENT_RETENTION": "0s"}, "WEBHOOK_EVENT_RETENTION"},
		{map[string]string{"INTENT_RETENTION": "12h"}, "must be at least KEY_RETENTION"},
		{map[string]string{"RECONCILE_RETENTION": "-1h"}, "RECONCILE_RETENTION"},
		{map[string]string{"LABEL_RETENTION": "2000h"}, "LABEL_RETENTION=2000h0m0s: want 0 (kept) or at least"},
		{map[string]string{"LABEL_RETENTION": "forever"}, "LABEL_RETENTION"},
		{map[string]string{"RECONCILE_SCHEDULE": "whenever"}, "RECONCILE_SCHEDULE"},
		{map[string]string{"ADMIN_ADDR": "127.0.0.1:0"}, "ADMIN_USER"},
		{map[string]string{"DATABASE_POOLED": "maybe"}, "DATABASE_POOLED"},
		{map[string]string{"DATABASE_DIRECT_URL": "::not a url"}, "DATABASE_DIRECT_URL"},
	}
	for _, c := range cases {
		var errb bytes.Buffer
		require.Equal(t, 2, run(context.Background(), []string{"worker"}, clitest.Env(c.env), io.Discard, &errb), c.env)
		require.Contains(t, errb.String(), c.want)
		require.Equal(t, 1, bytes.Count(bytes.TrimSpace(errb.Bytes()), []byte("\n"))+1, "one line: %q", errb.String())
	}
	require.Equal(t, 2, run(context.Background(), []string{"worker", "extra"}, clitest.Env(nil), io.Discard, io.Discard))
}

// The worker's /metrics has the worker's series, its database pool's, and
// none of the API's.
func TestWorkerExportsOnlyItsMetrics(t *testing.T) {
	t.Parallel()
	_, url := dbtest.New(t)
	e := clitest.Env(map[string]string{"DATABASE_URL": url, "METRICS_ADDR": "127.0.0.1:0", "CARRIER_URL": "http://127.0.0.1:1"})
	addr, _ := logtest.Serve(t, run, []string{"worker"}, e, "metrics listening")

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	page := string(b)
	require.Contains(t, page, "\nlabels_store_up 1\n")
	require.Contains(t, page, `labels_void_outcomes_total{outcome="voided"} 0`)
	require.Contains(t, page, `labels_db_pool_connections{state="in_use"}`)
	require.Contains(t, page, "\nlabels_db_pool_max_connections ")
	for _, n := range metrics.Names(metrics.API) {
		if slices.Contains(metrics.SharedNames(), n) {
			continue
		}
		require.NotContains(t, page, "\n"+n, "the worker exports the API's %s", n)
	}
}
