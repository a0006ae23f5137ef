package jobs_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
)

// gatedReceiver is a real HTTP server that answers nothing until its gate
// opens (then 204), and counts the requests it got and holds at once.
type gatedReceiver struct {
	gate        chan struct{}
	once        sync.Once
	arrived     atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	mu          sync.Mutex
	byID        map[string]int // webhook-id → requests
	got         []delivery
	srv         *httptest.Server
}

func newGatedReceiver(t *testing.T) *gatedReceiver {
	g := &gatedReceiver{gate: make(chan struct{}), byID: map[string]int{}}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.arrived.Add(1)
		n := g.inFlight.Add(1)
		for m := g.maxInFlight.Load(); n > m && !g.maxInFlight.CompareAndSwap(m, n); m = g.maxInFlight.Load() {
		}
		body, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.byID[r.Header.Get("webhook-id")]++
		g.got = append(g.got, delivery{header: r.Header.Clone(), body: body, at: time.Now()})
		g.mu.Unlock()
		select {
		case <-g.gate:
		case <-r.Context().Done():
		}
		g.inFlight.Add(-1) // before the answer is written: the sender cannot see the slot free earlier
		w.WriteHeader(http.StatusNoContent)
	}))
	// Cleanups run last registered first: the gate opens, then the server
	// closes (it waits for its handlers), then the stack made before stops.
	t.Cleanup(g.srv.Close)
	t.Cleanup(g.open)
	return g
}

func (g *gatedReceiver) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gatedReceiver) requests(webhookID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byID[webhookID]
}

// One caller's endpoint that never answers (a receiver blocked on a gate,
// with a 5 min WEBHOOK_TIMEOUT, so no attempt of it ends during the test)
// and three times the process's delivery slots of its events queued: the
// other caller's events are all delivered while it is still blocked. The
// blocked endpoint has WEBHOOK_ENDPOINT_CONCURRENCY attempts in flight at
// most; its other deliveries are held without an attempt counted.
func TestWebhookSlowEndpointDelaysOnlyItsOwnEvents(t *testing.T) {
	t.Parallel()
	const perEndpoint = 2
	m := metrics.NewWebhooks(nil)
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{Policy: lenient, Metrics: m,
		Timeout: 5 * time.Minute, EndpointConcurrency: perEndpoint}})
	slow := newGatedReceiver(t)
	fast := newReceiver(t, nil)
	tokSlow, tokFast := s.Token("slow"), s.Token("fast")
	setHook(t, s, "slow", slow.srv.URL)
	fastSecret := setHook(t, s, "fast", fast.srv.URL)

	slowEvents := 3 * jobs.DefaultWebhookConcurrency
	for i := range slowEvents {
		s.Accept(tokSlow, fmt.Sprintf("s-%d", i), stacktest.ParcelBody(20000+int64(i), 1, 900))
	}
	require.Eventually(t, func() bool {
		return s.Count(`SELECT count(*) FROM webhook_events WHERE caller_id = 'slow' AND dispatched_at IS NOT NULL`) == slowEvents &&
			slow.arrived.Load() > 0
	}, 2*time.Minute, 20*time.Millisecond, "the slow caller's events queued and its receiver reached")

	var fastIDs []string
	for i := range 5 {
		lr := s.Accept(tokFast, fmt.Sprintf("f-%d", i), stacktest.ParcelBody(30000+int64(i), 1, 900))
		fastIDs = append(fastIDs, lr.ID)
	}
	// The latch: every event of the fast caller delivered, the slow receiver
	// still holding what it got. The deadline only bounds a failure.
	require.Eventually(t, func() bool {
		return s.Count(`SELECT count(*) FROM webhook_events WHERE caller_id = 'fast' AND state = 'delivered'`) == len(fastIDs)
	}, 2*time.Minute, 20*time.Millisecond, "the fast caller's events, while the slow endpoint holds its attempts")

	for _, id := range fastIDs {
		require.Equal(t, 1, countDeliveries(fast, "msg_"+id), id)
		state, attempts := eventState(t, s, id)
		require.Equal(t, "delivered", state)
		require.Equal(t, 1, attempts)
	}
	for _, d := range fast.deliveries() {
		_, err := client.VerifyWebhook(fastSecret, d.header, d.body, time.Now())
		require.NoError(t, err, "signed")
	}
	require.LessOrEqual(t, slow.arrived.Load(), int64(perEndpoint), "at most WEBHOOK_ENDPOINT_CONCURRENCY attempts at the slow endpoint")
	require.LessOrEqual(t, s.Count(`SELECT coalesce(sum(attempts), 0) FROM webhook_events WHERE caller_id = 'slow'`), perEndpoint,
		"a held delivery counts no attempt")
	require.Zero(t, s.Count(`SELECT count(*) FROM webhook_events WHERE caller_id = 'slow' AND state <> 'pending'`))
	require.Positive(t, testutil.ToFloat64(m.Held), "the slow caller's other deliveries were held")
}

// Deliveries held for their endpoint's limit (one attempt in flight here)
// are delivered once the endpoint answers: each event once, signed, with
// one attempt counted, never two requests at the endpoint at once.
func TestWebhookHeldDeliveriesAreDelivered(t *testing.T) {
	t.Parallel()
	const events = 8
	m := metrics.NewWebhooks(nil)
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{Policy: lenient, Metrics: m,
		Timeout: 5 * time.Minute, EndpointConcurrency: 1, HoldMax: 100 * time.Millisecond}})
	rc := newGatedReceiver(t)
	tok := s.Token("shop")
	secret := setHook(t, s, "shop", rc.srv.URL)
	var ids []string
	for i := range events {
		lr := s.Accept(tok, fmt.Sprintf("k-%d", i), stacktest.ParcelBody(40000+int64(i), 1, 900))
		ids = append(ids, lr.ID)
	}
	// While the first attempt is held at the receiver, the others are held
	// by the limit, again and again.
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Held) >= 3*events }, 2*time.Minute, 10*time.Millisecond)
	require.Equal(t, int64(1), rc.arrived.Load())
	require.Equal(t, 1, s.Count(`SELECT sum(attempts) FROM webhook_events WHERE caller_id = 'shop'`))

	rc.open()
	require.Eventually(t, func() bool {
		return s.Count(`SELECT count(*) FROM webhook_events WHERE caller_id = 'shop' AND state = 'delivered'`) == events
	}, 2*time.Minute, 20*time.Millisecond)
	for _, id := range ids {
		require.Equal(t, 1, rc.requests("msg_"+id), id)
		_, attempts := eventState(t, s, id)
		require.Equal(t, 1, attempts, id)
	}
	require.Equal(t, int64(1), rc.maxInFlight.Load(), "one attempt in flight at the endpoint")
	require.Equal(t, float64(events), testutil.ToFloat64(m.Deliveries.WithLabelValues(metrics.WebhookDelivered)))
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, d := range rc.got {
		_, err := client.VerifyWebhook(secret, d.header, d.body, time.Now())
		require.NoError(t, err, "signed")
	}
}

func countDeliveries(rc *receiver, webhookID string) int {
	n := 0
	for _, d := range rc.deliveries() {
		if d.header.Get("webhook-id") == webhookID {
			n++
		}
	}
	return n
}
