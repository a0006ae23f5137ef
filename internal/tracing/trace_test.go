package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/webhook"
)

// hookReceiver is a webhook endpoint that records the traceparent of each
// delivery.
type hookReceiver struct {
	mu           sync.Mutex
	traceparents []string
	srv          *httptest.Server
}

func newHookReceiver(t *testing.T, s *stacktest.SimStack, caller string) *hookReceiver {
	t.Helper()
	rc := &hookReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.traceparents = append(rc.traceparents, r.Header.Get("traceparent"))
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	_, raw, err := webhook.NewSecret()
	require.NoError(t, err)
	_, err = postgres.SetWebhook(context.Background(), s.Pool, caller, rc.srv.URL+"/hooks", postgres.Secret{Value: raw})
	require.NoError(t, err)
	return rc
}

func (rc *hookReceiver) got() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.traceparents...)
}

// create posts one label request with the extra headers (name, value pairs)
// and returns the accepted request's id.
func create(t *testing.T, s *stacktest.SimStack, token, key string, headers ...string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/labels", bytes.NewReader(stacktest.ParcelBody(4100, 1, 900)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	var lr labels.LabelRequest
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&lr))
	return lr.ID
}

var lenient = jobs.WebhookConfig{Policy: webhook.Policy{AllowInsecure: true, AllowPrivate: true}}

// A create followed from its 202 to its webhook: with a recorder installed,
// the caller's trace holds the API's span, the accept, the relay, the job,
// the carrier call (whose traceparent the simulator received) and the
// completion, in that chain; the webhook delivery is a trace of its own
// linked to it.
func TestOneTraceFromCreateToWebhook(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	s := stacktest.NewSim(t, stacktest.SimOpts{Webhooks: lenient})
	token := s.Token("shop")
	hooks := newHookReceiver(t, s, "shop")

	// The caller's own trace: its traceparent is honoured.
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	id := create(t, s, token, "k-traced", "traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")

	var spans map[string]sdktrace.ReadOnlySpan // by name, the first ended
	require.Eventually(t, func() bool {
		spans = map[string]sdktrace.ReadOnlySpan{}
		for _, sp := range rec.Ended() {
			if _, ok := spans[sp.Name()]; !ok {
				spans[sp.Name()] = sp
			}
		}
		for _, n := range []string{"POST /v1/labels", "accept", "outbox.relay", "river.work", "carrier.buy", "buy_label.complete", "webhook.deliver"} {
			if spans[n] == nil {
				return false
			}
		}
		return len(hooks.got()) == 1
	}, time.Minute, 10*time.Millisecond, "the spans of the whole pipeline")

	// One chain, in the caller's trace.
	chain := []string{"POST /v1/labels", "accept", "outbox.relay", "river.work", "carrier.buy"}
	for i, n := range chain {
		sp := spans[n]
		require.Equal(t, callerTrace, sp.SpanContext().TraceID().String(), n)
		if i > 0 {
			require.Equal(t, spans[chain[i-1]].SpanContext().SpanID(), sp.Parent().SpanID(), "%s is a child of %s", n, chain[i-1])
		}
	}
	require.Equal(t, "00f067aa0ba902b7", spans["POST /v1/labels"].Parent().SpanID().String(), "the caller's span is the parent")
	require.Equal(t, trace.SpanKindServer, spans["POST /v1/labels"].SpanKind())
	complete := spans["buy_label.complete"]
	require.Equal(t, callerTrace, complete.SpanContext().TraceID().String())
	require.Equal(t, spans["river.work"].SpanContext().SpanID(), complete.Parent().SpanID())
	requireAttr(t, spans["accept"], "labels.request_id", id)
	requireAttr(t, spans["outbox.relay"], "labels.request_id", id)
	requireAttr(t, spans["river.work"], "kind", "buy_label")
	requireAttr(t, spans["carrier.buy"], "labels.carrier_outcome", "bought")

	// The carrier call carried the trace: the simulator received the
	// traceparent of otelhttp's client span under carrier.buy.
	sent := s.Sim.Traceparents()
	require.Len(t, sent, 1)
	sc := tracing.SpanContext(sent[0])
	require.Equal(t, callerTrace, sc.TraceID().String(), sent[0])
	var httpCall sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.SpanContext().SpanID() == sc.SpanID() {
			httpCall = sp
		}
	}
	require.NotNil(t, httpCall, "the span the carrier was told of")
	require.Equal(t, trace.SpanKindClient, httpCall.SpanKind())
	require.Equal(t, spans["carrier.buy"].SpanContext().SpanID(), httpCall.Parent().SpanID())

	// The delivery is its own trace, linked to the purchase's, and its
	// request carries its own traceparent.
	deliver := spans["webhook.deliver"]
	require.NotEqual(t, callerTrace, deliver.SpanContext().TraceID().String())
	require.Len(t, deliver.Links(), 1)
	require.Equal(t, callerTrace, deliver.Links()[0].SpanContext.TraceID().String())
	require.Equal(t, complete.SpanContext().SpanID(), deliver.Links()[0].SpanContext.SpanID())
	require.Equal(t, deliver.SpanContext().TraceID(), tracing.SpanContext(hooks.got()[0]).TraceID())

	// What crossed the async hop is stored: the job's metadata, the event's
	// traceparent.
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM river_job WHERE kind = 'buy_label' AND metadata->>'traceparent' LIKE '00-`+callerTrace+`-%'`))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM webhook_events WHERE request_id = $1 AND traceparent LIKE '00-`+callerTrace+`-%'`, id))
}

func requireAttr(t *testing.T, sp sdktrace.ReadOnlySpan, key, want string) {
	t.Helper()
	for _, kv := range sp.Attributes() {
		if string(kv.Key) == key {
			require.Equal(t, want, kv.Value.Emit(), "%s of %s", key, sp.Name())
			return
		}
	}
	t.Fatalf("span %s has no attribute %s: %v", sp.Name(), key, sp.Attributes())
}

// Off (no Setup, no Install): a caller's traceparent is not stored, nothing
// is sent on, and the hop carries nothing.
func TestOffStoresAndSendsNothing(t *testing.T) {
	require.False(t, tracing.On())
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	pending := stacktest.NewSim(t, stacktest.SimOpts{NoWorker: true})
	id := create(t, pending, pending.Token("shop"), "k-off", "traceparent", tp)
	require.Equal(t, 1, pending.Count(`SELECT count(*) FROM label_intent_outbox WHERE request_id = $1 AND traceparent IS NULL`, id))

	s := stacktest.NewSim(t, stacktest.SimOpts{Webhooks: lenient})
	token := s.Token("shop")
	hooks := newHookReceiver(t, s, "shop")
	id = create(t, s, token, "k-off", "traceparent", tp)
	require.Eventually(t, func() bool { return len(hooks.got()) == 1 }, time.Minute, 10*time.Millisecond, "the webhook")
	require.Equal(t, []string{""}, s.Sim.Traceparents(), "no traceparent to the carrier")
	require.Equal(t, []string{""}, hooks.got(), "no traceparent to the webhook")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM webhook_events WHERE request_id = $1 AND traceparent IS NULL`, id))
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM river_job WHERE metadata ? 'traceparent'`))
}
