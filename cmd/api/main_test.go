package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/metrics"
)

func TestHelpAndBadConfig(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"api", "--help"}, clitest.Env(nil), &out, &errb))
	require.Contains(t, out.String(), "api caller add NAME")

	for _, e := range []map[string]string{
		{"KEY_RETENTION": "soon"},
		{"KEY_RETENTION": "-1h"},
		{"LOG_LEVEL": "loud"},
		{"LOG_FORMAT": "xml"},
		{"DATABASE_URL": "::not a url"},
		{"DATABASE_POOLED": "maybe"},
		{"DATABASE_DIRECT_URL": "::not a url"},
		{"WEBHOOK_ALLOW_INSECURE": "maybe"},
		{"WEBHOOK_ALLOW_PRIVATE": "2"},
		{"WEBHOOK_ROTATION_OVERLAP": "-1h"},
		{"WEBHOOK_SECRET_KEY": "c2hvcnQ="},
		{"WEBHOOK_SECRET_KEY_OLD": "c2hvcnQ="},
		{"WEBHOOK_SECRET_KEY_OLD": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="},
		{"WEBHOOK_ALLOW_UNSEALED": "perhaps"},
		{"RATE_LIMIT": "-1"},
		{"RATE_LIMIT": "fast"},
		{"RATE_LIMIT_BURST": "-3"},
		{"PREFER_WAIT_MAX": "-1"},
		{"PREFER_WAIT_MAX": "100001"},
		{"PREFER_WAIT_MAX": "many"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_SAMPLER": "sometimes"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
	} {
		errb.Reset()
		require.Equal(t, 2, run(context.Background(), []string{"api"}, clitest.Env(e), io.Discard, &errb), e)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errb.String()), "\n")+1, "one clear line: %q", errb.String())
	}
	require.Equal(t, 2, run(context.Background(), []string{"api", "frobnicate"}, clitest.Env(nil), io.Discard, io.Discard))
	require.Equal(t, 2, run(context.Background(), []string{"api", "--bogus"}, clitest.Env(nil), io.Discard, io.Discard))
}

// migrate twice, add a caller, serve on a free port, answer a request with the
// printed token, and stop cleanly on cancellation.
func TestMigrateCallerServe(t *testing.T) {
	t.Parallel()
	_, url := dbtest.New(t)
	e := clitest.Env(map[string]string{"DATABASE_URL": url, "API_ADDR": "127.0.0.1:0"})
	ctx := context.Background()
	var out bytes.Buffer
	require.Equal(t, 0, run(ctx, []string{"api", "migrate"}, e, &out, io.Discard))
	require.Contains(t, out.String(), "up to date")

	out.Reset()
	require.Equal(t, 0, run(ctx, []string{"api", "caller", "add", "fulfilment"}, e, &out, io.Discard))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	token := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(token, "lk_"))
	require.Equal(t, 2, run(ctx, []string{"api", "caller", "add", "bad name"}, e, io.Discard, io.Discard))

	addr, logs := logtest.Serve(t, run, []string{"api"}, e, "listening")

	api := &stacktest.Stack{T: t, URL: "http://" + addr}
	created := api.Create(token, "label:918273:1:v1", stacktest.ParcelBody(918273, 1, 1450))
	require.Equal(t, http.StatusAccepted, created.Status, string(created.Body))
	require.NotContains(t, logs.String(), "Exampleton", "the address is never logged")
	require.NotContains(t, logs.String(), token, "the token is never logged")

	// The API exports its own series, its database pool's, and none of the
	// worker's.
	scraped := scrapeNames(t, "http://"+addr+"/metrics")
	require.Contains(t, scraped, `labels_http_requests_total{method="POST",route="create_label",status="202"}`)
	require.Contains(t, scraped, `labels_idempotency_outcomes_total{outcome="new"}`)
	require.Contains(t, scraped, `labels_db_pool_connections{state="in_use"}`)
	require.Contains(t, scraped, "labels_db_pool_max_connections")
	for _, n := range metrics.Names(metrics.Worker) {
		if slices.Contains(metrics.SharedNames(), n) {
			continue
		}
		for s := range scraped {
			require.False(t, s == n || strings.HasPrefix(s, n+"{") || strings.HasPrefix(s, n+"_"), "the API exports the worker's %s", s)
		}
	}
}

// With API_METRICS_ADDR, /metrics is served on that listener alone: the
// public port answers it 404 like any unknown path, and the metrics
// listener serves the series of the requests the public port answered, and
// nothing else.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	_, url := dbtest.New(t)
	e := clitest.Env(map[string]string{"DATABASE_URL": url, "API_ADDR": "127.0.0.1:0", "API_METRICS_ADDR": "127.0.0.1:0"})
	ctx := context.Background()
	require.Equal(t, 0, run(ctx, []string{"api", "migrate"}, e, io.Discard, io.Discard))
	var out bytes.Buffer
	require.Equal(t, 0, run(ctx, []string{"api", "caller", "add", "fulfilment"}, e, &out, io.Discard))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	token := lines[len(lines)-1]

	addr, logs := logtest.Serve(t, run, []string{"api"}, e, "listening")
	metricsAddr := logs.WaitAddr(t, "metrics listening", 30*time.Second)
	require.NotEqual(t, addr, metricsAddr)

	api := &stacktest.Stack{T: t, URL: "http://" + addr}
	created := api.Create(token, "label:918274:1:v1", stacktest.ParcelBody(918274, 1, 1450))
	require.Equal(t, http.StatusAccepted, created.Status, string(created.Body))

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, err := http.NewRequest(method, "http://"+addr+"/metrics", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s /metrics on the public port", method)
		require.Empty(t, resp.Header.Get("Allow"), "the public port does not offer /metrics")
	}

	scraped := scrapeNames(t, "http://"+metricsAddr+"/metrics")
	require.Contains(t, scraped, `labels_http_requests_total{method="POST",route="create_label",status="202"}`)
	require.Contains(t, scraped, `labels_http_requests_total{method="GET",route="unknown",status="404"}`, "the refused /metrics is counted as the unknown path it is")
	for _, path := range []string{"/v1/labels", "/healthz", "/readyz", "/openapi.yaml"} {
		resp, err := http.Get("http://" + metricsAddr + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "the metrics listener serves %s", path)
	}
}

// scrapeNames returns the series of a /metrics page (name and labels), each
// with its value.
func scrapeNames(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	series := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series[line[:i]] = line[i+1:]
	}
	return series
}
