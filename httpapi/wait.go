package httpapi

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/postgres"
)

// Prefer: wait (api.md) holds the answer to a POST whose intent is pending
// until the outcome is final or the wait ends. What a held request costs:
//
//   - No database connection while it waits. It reads its intent once, when
//     it is woken: by the completion's notification (notify.ChannelFinal,
//     routed here by request id), or by the sweep, one query every
//     WaitSweep for every held request at once (a notification missed, the
//     listener reconnected, or no listener at all). The database work of the
//     waiting does not grow with the number of held requests.
//   - Memory: its goroutine and HTTP connection (about 30 KB of heap and 35 KB
//     of RSS in all, measured by BenchmarkPreferWaitFlood), of which a few
//     hundred bytes here; at most MaxWaiters are held per process. Past that, a request is answered at
//     once, as if it had no preference, with Retry-After the wait it asked
//     for (so that it comes back no sooner than it would have been answered).

// DefaultMaxWaiters is the most Prefer: wait requests one API process holds at
// once (PREFER_WAIT_MAX).
const DefaultMaxWaiters = 1000

// DefaultWaitSweep is how often the intents of every held request are read
// again, in one query, in case the notification of a completion was missed.
const DefaultWaitSweep = time.Second

// waiters is the registry of the requests held under Prefer: wait.
type waiters struct {
	max     int
	pool    *pgxpool.Pool
	timeout time.Duration
	every   time.Duration
	ticks   <-chan time.Time // Deps.WaitSweepTicks
	after   func(time.Duration) <-chan time.Time
	gauge   prometheus.Gauge
	log     zerolog.Logger

	mu       sync.Mutex
	byID     map[string][]*waiter // request id → its held requests
	n        int
	sweeping bool          // the sweep loop runs (while anything is held)
	kick     chan struct{} // a reconnect of the listener asks for a sweep now
}

// waiter is one held request.
type waiter struct {
	requestID string
	wake      chan struct{} // one pending value at most
}

func newWaiters(d Deps) *waiters {
	r := &waiters{max: d.MaxWaiters, pool: d.Pool, timeout: d.Timeout, every: d.WaitSweep,
		ticks: d.WaitSweepTicks, after: d.WaitAfter, gauge: d.Metrics.Waiters, log: d.Log,
		byID: map[string][]*waiter{}, kick: make(chan struct{}, 1)}
	switch {
	case r.max == 0:
		r.max = DefaultMaxWaiters
	case r.max < 0:
		r.max = 0
	}
	if r.every <= 0 {
		r.every = DefaultWaitSweep
	}
	if r.after == nil {
		r.after = time.After
	}
	return r
}

// add holds a request waiting on requestID, or reports false when as many
// are held as the registry may.
func (r *waiters) add(requestID string) (*waiter, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= r.max {
		return nil, false
	}
	w := &waiter{requestID: requestID, wake: make(chan struct{}, 1)}
	r.byID[requestID] = append(r.byID[requestID], w)
	r.n++
	r.gauge.Inc()
	if !r.sweeping {
		r.sweeping = true
		go r.sweep()
	}
	return w, true
}

// remove lets w go.
func (r *waiters) remove(w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.byID[w.requestID]
	for i, x := range ws {
		if x == w {
			ws[i] = ws[len(ws)-1]
			ws = ws[:len(ws)-1]
			break
		}
	}
	if len(ws) == 0 {
		delete(r.byID, w.requestID)
	} else {
		r.byID[w.requestID] = ws
	}
	r.n--
	r.gauge.Dec()
}

// notified is the listener's watch of notify.ChannelFinal: it wakes the
// requests held on the request id that became final, and after a reconnect
// (notifications may have been lost) has the sweep read them all now.
func (r *waiters) notified(requestID string, reconnected bool) {
	if reconnected {
		r.mu.Lock()
		none := r.n == 0
		r.mu.Unlock()
		if none {
			return
		}
		select {
		case r.kick <- struct{}{}:
		default:
		}
		return
	}
	r.wakeAll([]string{requestID})
}

func (r *waiters) wakeAll(requestIDs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range requestIDs {
		for _, w := range r.byID[id] {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// ids returns the request ids held now, or nil (and the sweep loop ends)
// when none is.
func (r *waiters) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byID) == 0 {
		r.sweeping = false
		return nil
	}
	ids := make([]string, 0, len(r.byID))
	for id := range r.byID {
		ids = append(ids, id)
	}
	return ids
}

// sweep runs while requests are held: at every tick (or a reconnect's kick)
// one query finds which of their intents are final, and wakes those.
func (r *waiters) sweep() {
	tick := r.ticks
	if tick == nil {
		t := time.NewTicker(r.every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
		case <-r.kick:
		}
		ids := r.ids()
		if ids == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		final, err := postgres.FinalRequestIDs(ctx, r.pool, ids)
		cancel()
		if err != nil {
			// The next tick tries again; a held request ends at its deadline.
			r.log.Debug().Err(err).Int("waiting", len(ids)).Msg("Prefer: wait sweep failed")
			continue
		}
		r.wakeAll(final)
	}
}

// waitFinal holds a request for up to d until the pending intent in becomes
// final, and returns the intent as last read. It holds no database
// connection while it waits: it reads the intent only when w is woken.
func (s *Server) waitFinal(ctx context.Context, w *waiter, callerID string, in *postgres.Intent, d time.Duration) (*postgres.Intent, error) {
	defer s.waiters.remove(w)
	deadline := s.waiters.after(d)
	for {
		select {
		case <-ctx.Done():
			return in, nil
		case <-deadline:
			s.deps.Metrics.WaitOutcomes.WithLabelValues("timeout").Inc()
			return in, nil
		case <-w.wake:
		}
		qctx, cancel := context.WithTimeout(ctx, s.deps.Timeout)
		got, err := postgres.GetIntent(qctx, s.deps.Pool, callerID, in.RequestID)
		cancel()
		if err != nil {
			return nil, err
		}
		in = got
		if in.Status != labels.StatusPending {
			s.deps.Metrics.WaitOutcomes.WithLabelValues("final").Inc()
			return in, nil
		}
	}
}

// parsePreferWait reads RFC 7240's wait preference. Values outside 1..30 are
// not honoured (the preference is ignored, as RFC 7240 lets a server do).
func parsePreferWait(values []string) (time.Duration, bool) {
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			name, val, found := strings.Cut(strings.TrimSpace(strings.Split(pref, ";")[0]), "=")
			if !found || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err != nil || n < 1 || n > 30 {
				return 0, false
			}
			return time.Duration(n) * time.Second, true
		}
	}
	return 0, false
}
