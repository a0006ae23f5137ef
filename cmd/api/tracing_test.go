package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/internal/testutil/otlptest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the API exports its spans to an OTLP
// receiver: a create continues the caller's trace (the server span and the
// accept), logs its trace_id, and stores the traceparent with the intent.
// Not parallel: tracing is the process's.
func TestServeExportsTraces(t *testing.T) {
	rc := otlptest.New(t)
	_, url := dbtest.New(t)
	e := clitest.Env(map[string]string{"DATABASE_URL": url, "API_ADDR": "127.0.0.1:0",
		"OTEL_EXPORTER_OTLP_ENDPOINT": rc.URL, "OTEL_SERVICE_NAME": "api-under-test"})
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"api", "caller", "add", "shop"}, e, &out, io.Discard))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	token := lines[len(lines)-1]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"api"}, e, io.Discard, logs) }()
	addr := logs.WaitAddr(t, "listening", 30*time.Second)

	const trace = "0af7651916cd43dd8448eb211c80319c"
	api := &stacktest.Stack{T: t, URL: "http://" + addr}
	created := api.Create(token, "k-traced", stacktest.ParcelBody(7100, 1, 900), "traceparent", "00-"+trace+"-b7ad6b7169203331-01")
	require.Equal(t, http.StatusAccepted, created.Status, string(created.Body))
	cancel()
	require.Equal(t, 0, <-done, logs.String()) // the shutdown flushes the spans

	for _, name := range []string{"POST /v1/labels", "accept"} {
		var traces []string
		for _, s := range rc.Named(name) {
			require.Equal(t, "api-under-test", s.Service)
			traces = append(traces, s.TraceID)
		}
		require.Contains(t, traces, trace, "span %s of the caller's trace: %v", name, rc.Spans())
	}
	require.Contains(t, logs.String(), `"trace_id":"`+trace+`"`)

	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	var stored string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT traceparent FROM label_intent_outbox`).Scan(&stored))
	require.True(t, strings.HasPrefix(stored, "00-"+trace+"-"), stored)
}
