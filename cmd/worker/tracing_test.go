package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/internal/testutil/otlptest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the worker exports its spans to an
// OTLP receiver: the relay, the job, the carrier call and the completion
// continue the trace whose traceparent the accept stored with the intent,
// and the carrier receives it. Not parallel: tracing is the process's.
func TestWorkerExportsTraces(t *testing.T) {
	rc := otlptest.New(t)
	s := stacktest.NewSim(t, stacktest.SimOpts{NoWorker: true})
	token := s.Token("shop")
	created := (&stacktest.Stack{T: t, URL: s.URL}).Create(token, "k-traced", stacktest.ParcelBody(7200, 1, 900))
	require.Equal(t, http.StatusAccepted, created.Status, string(created.Body))
	// What a traced API stores with the intent.
	const trace = "5b8efff798038103d269b633813fc60c"
	_, err := s.Pool.Exec(context.Background(), `UPDATE label_intent_outbox SET traceparent = $1`, "00-"+trace+"-eee19b7ec3c1b174-01")
	require.NoError(t, err)

	e := clitest.Env(map[string]string{"DATABASE_URL": s.Pool.Config().ConnString(), "METRICS_ADDR": "127.0.0.1:0",
		"CARRIER_URL": s.CarrierURL, "OTEL_EXPORTER_OTLP_ENDPOINT": rc.URL})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"worker"}, e, io.Discard, logs) }()
	logs.WaitAddr(t, "metrics listening", 30*time.Second)
	require.Eventually(t, func() bool {
		return s.Count(`SELECT count(*) FROM label_intents WHERE status = 'succeeded'`) == 1
	}, time.Minute, 10*time.Millisecond, "the label bought")
	cancel()
	require.Equal(t, 0, <-done, logs.String()) // the shutdown flushes the spans

	for _, name := range []string{"outbox.relay", "river.work", "carrier.buy", "buy_label.complete"} {
		var traces []string
		for _, sp := range rc.Named(name) {
			require.Equal(t, "labels-worker", sp.Service)
			traces = append(traces, sp.TraceID)
		}
		require.Contains(t, traces, trace, "span %s of the stored trace: %v", name, rc.Spans())
	}
	sent := s.Sim.Traceparents()
	require.Len(t, sent, 1)
	require.Contains(t, sent[0], "-"+trace+"-")
	require.Contains(t, logs.String(), `"trace_id":"`+trace+`"`, "the job's log line")
}
