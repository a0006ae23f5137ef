package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/webhook"
)

// arrivals is a receiver that answers 204 at once and keeps the time each
// webhook-id first arrived.
type arrivals struct {
	mu  sync.Mutex
	at  map[string]time.Time
	srv *httptest.Server
}

func newArrivals(tb testing.TB) *arrivals {
	a := &arrivals{at: map[string]time.Time{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		a.mu.Lock()
		if _, ok := a.at[r.Header.Get("webhook-id")]; !ok {
			a.at[r.Header.Get("webhook-id")] = now
		}
		a.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	tb.Cleanup(a.srv.Close)
	return a
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// BenchmarkWebhookOtherCallerLatency is issue 33's figure for a slow
// endpoint: the delivery latency (from the event's creation, the
// completion, to the receiver) of another caller's events while one caller's
// receiver never answers with hostile events queued, against the same
// caller's latency with nothing hostile (the control), measured in one run.
// Each attempt at the hostile receiver lasts WEBHOOK_TIMEOUT (2 s here, 15 s
// by default), with the default concurrency (20) and retry delays (5 s base).
//
//	go test -run '^$' -bench BenchmarkWebhookOtherCallerLatency -benchtime 1x ./jobs/
func BenchmarkWebhookOtherCallerLatency(b *testing.B) {
	const (
		hostileEvents = 200
		otherEvents   = 40
		spacing       = 250 * time.Millisecond // between two of the other caller's requests
	)
	timeout := 2 * time.Second
	for range b.N {
		s := stacktest.New(b, stacktest.Opts{Webhooks: jobs.WebhookConfig{
			Policy:    webhook.Policy{AllowInsecure: true, AllowPrivate: true},
			Timeout:   timeout,
			RetryBase: 5 * time.Second,
			Metrics:   metrics.NewWebhooks(nil),
		}})
		ctx := context.Background()
		order := int64(0)
		hook := func(caller, url string) string {
			tok := s.Token(caller)
			_, raw, err := webhook.NewSecret()
			require.NoError(b, err)
			_, err = postgres.SetWebhook(ctx, s.Pool, caller, url, postgres.Secret{Value: raw})
			require.NoError(b, err)
			return tok
		}
		// latencies sends n requests of caller, spacing apart, waits for their
		// events at rc and returns each one's latency.
		latencies := func(caller, tok string, rc *arrivals, n int) []time.Duration {
			for i := range n {
				order++
				s.Accept(tok, fmt.Sprintf("k-%d", i), stacktest.ParcelBody(order, 1, 900))
				time.Sleep(spacing)
			}
			deadline := time.Now().Add(5 * time.Minute)
			for rc.count() < n {
				if time.Now().After(deadline) {
					b.Fatalf("%s: %d of %d events delivered after 5 min", caller, rc.count(), n)
				}
				time.Sleep(20 * time.Millisecond)
			}
			rows, err := s.Pool.Query(ctx, `SELECT event_id, created_at FROM webhook_events WHERE caller_id = $1`, caller)
			require.NoError(b, err)
			defer rows.Close()
			var out []time.Duration
			rc.mu.Lock()
			defer rc.mu.Unlock()
			for rows.Next() {
				var id string
				var created time.Time
				require.NoError(b, rows.Scan(&id, &created))
				out = append(out, rc.at[id].Sub(created))
			}
			require.NoError(b, rows.Err())
			require.Len(b, out, n)
			slices.Sort(out)
			return out
		}

		// The control: nothing hostile queued.
		rcControl := newArrivals(b)
		control := latencies("control", hook("control", rcControl.srv.URL), rcControl, otherEvents)

		// The hostile receiver never answers: each attempt lasts the timeout.
		release := make(chan struct{})
		var hostileHits atomic.Int64
		hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hostileHits.Add(1)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		b.Cleanup(hostile.Close)
		b.Cleanup(func() { close(release) })
		tok := hook("hostile", hostile.URL)
		for i := range hostileEvents {
			order++
			s.Accept(tok, fmt.Sprintf("h-%d", i), stacktest.ParcelBody(order, 1, 900))
		}
		deadline := time.Now().Add(5 * time.Minute)
		for s.Count(`SELECT count(*) FROM webhook_events WHERE caller_id = 'hostile' AND dispatched_at IS NOT NULL`) < hostileEvents || hostileHits.Load() == 0 {
			if time.Now().After(deadline) {
				b.Fatal("the hostile events were not dispatched after 5 min")
			}
			time.Sleep(20 * time.Millisecond)
		}
		rcOther := newArrivals(b)
		other := latencies("other", hook("other", rcOther.srv.URL), rcOther, otherEvents)

		pct := func(d []time.Duration, p float64) float64 {
			return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
		}
		b.ReportMetric(float64(hostileEvents), "hostile_events")
		b.ReportMetric(pct(control, 0.5), "control_p50_ms")
		b.ReportMetric(pct(control, 0.99), "control_p99_ms")
		b.ReportMetric(pct(other, 0.5), "other_p50_ms")
		b.ReportMetric(pct(other, 0.99), "other_p99_ms")
		b.ReportMetric(pct(other, 0.5)/pct(control, 0.5), "ratio_p50")
		b.ReportMetric(pct(other, 0.99)/pct(control, 0.99), "ratio_p99")
		b.ReportMetric(float64(hostileHits.Load()), "hostile_attempts")
		b.Logf("control %s; other %s", fmtDurations(control), fmtDurations(other))
	}
}

func fmtDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(parts, " ")
}
