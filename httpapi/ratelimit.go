package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labelkit/labels"
)

// DefaultRateLimit is RateLimit.PerSecond when unset: no limit. The worker's
// relay already gives callers turns, so that one caller's burst delays
// mainly its own labels, and the accept is cheap; a default limit would
// refuse a caller's legitimate wave of labels that the pipeline absorbs.
// Set a limit to protect the database from a runaway client.
const DefaultRateLimit = 0

// RateLimit limits the creates (POST /v1/labels) of each caller in one API
// process: a token bucket per caller, PerSecond tokens a second up to Burst.
// Past it, the answer is 429 rate_limited with Retry-After, before the body
// is read: nothing is stored, and a retry with the same key after
// Retry-After is safe. Repeats of a key count as creates.
type RateLimit struct {
	// PerSecond is the sustained rate of one caller; 0 or less: no limit.
	PerSecond float64
	// Burst is how many creates a caller may send at once; 0: one second's
	// worth (PerSecond, at least 1).
	Burst int
	// Now is the limiter's clock (default time.Now); for tests.
	Now func() time.Time
}

// limiter is a token bucket per caller, kept as the time at which its
// bucket is full again (the generic cell rate algorithm): one time a caller.
type limiter struct {
	interval time.Duration // between two tokens
	window   time.Duration // the burst: how far ahead of now a bucket may be drawn
	now      func() time.Time

	mu   sync.Mutex
	full map[string]time.Time // caller → when its bucket is full again
}

// newLimiter returns the limiter of l, or nil when l sets no limit.
func newLimiter(l RateLimit) *limiter {
	if l.PerSecond <= 0 {
		return nil
	}
	burst := l.Burst
	if burst <= 0 {
		burst = max(1, int(math.Ceil(l.PerSecond)))
	}
	interval := time.Duration(float64(time.Second) / l.PerSecond)
	now := l.Now
	if now == nil {
		now = time.Now
	}
	return &limiter{interval: interval, window: time.Duration(burst) * interval, now: now, full: map[string]time.Time{}}
}

// allow takes a token of caller's bucket, or says how long until one is there.
func (l *limiter) allow(caller string) (ok bool, retryAfter time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	full := l.full[caller]
	if full.Before(now) {
		full = now
	}
	next := full.Add(l.interval)
	if over := next.Sub(now) - l.window; over > 0 {
		return false, over
	}
	if len(l.full) >= 1024 {
		// A full bucket is the same as none: forget those, so that the map
		// holds only the callers active within a burst's window.
		for c, t := range l.full {
			if !t.After(now) {
				delete(l.full, c)
			}
		}
	}
	l.full[caller] = next
	return true, 0
}

// limit answers 429 rate_limited, with Retry-After in whole seconds, when
// the caller is over its rate; otherwise it runs h.
func (s *Server) limit(h func(w http.ResponseWriter, r *http.Request, callerID string)) func(w http.ResponseWriter, r *http.Request, callerID string) {
	if s.limiter == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, callerID string) {
		if ok, wait := s.limiter.allow(callerID); !ok {
			secs := max(1, int64(math.Ceil(wait.Seconds())))
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			writeProblem(w, r, labels.CodeRateLimited, "this caller sends creates faster than its rate limit; retry with the same key after Retry-After")
			return
		}
		h(w, r, callerID)
	}
}
