package jobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testLimiter is a limiter on a clock the test moves, without jitter.
func testLimiter(perEndpoint, slots int, holdMax time.Duration) (*endpointLimiter, *time.Time) {
	l := newEndpointLimiter(perEndpoint, slots, holdMax)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	l.jitter = func(time.Duration) time.Duration { return 0 }
	return l, &now
}

func inFlight(l *endpointLimiter, endpoint string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.eps[endpoint]; e != nil {
		return len(e.started)
	}
	return 0
}

// An endpoint gets perEndpoint attempts in flight; the next is held, and
// given back once one ends.
func TestEndpointLimiterCapsEachEndpoint(t *testing.T) {
	t.Parallel()
	l, _ := testLimiter(2, 20, time.Minute)
	a1, _ := l.acquire("a")
	a2, _ := l.acquire("a")
	require.NotNil(t, a1)
	require.NotNil(t, a2)
	a3, hold := l.acquire("a")
	require.Nil(t, a3)
	require.Positive(t, hold)
	b1, _ := l.acquire("b")
	require.NotNil(t, b1, "another endpoint is not held by a's limit")

	a1.release()
	a1.release() // a second release gives back nothing more
	require.Equal(t, 1, inFlight(l, "a"))
	a3, _ = l.acquire("a")
	require.NotNil(t, a3)
	var nilSlot *endpointSlot
	nilSlot.release()
}

// The last quarter of the process's slots is kept for endpoints with no
// attempt in flight: several slow endpoints together do not fill it.
func TestEndpointLimiterKeepsAReserve(t *testing.T) {
	t.Parallel()
	l, _ := testLimiter(4, 8, time.Minute) // reserve 2: second attempts while fewer than 6 are in flight
	for _, ep := range []string{"a", "a", "b", "b", "c", "c"} {
		s, _ := l.acquire(ep)
		require.NotNil(t, s, ep)
	}
	s, _ := l.acquire("c")
	require.Nil(t, s, "a third at c would eat into the reserve")
	for _, ep := range []string{"d", "e"} {
		s, _ := l.acquire(ep)
		require.NotNil(t, s, "an endpoint with nothing in flight takes the reserve: %s", ep)
	}
	s, _ = l.acquire("d")
	require.Nil(t, s)
}

// Held deliveries of an endpoint are asked back one after the other, a step
// apart: the endpoint's attempt duration (the age of its oldest attempt in
// flight, or the average of those that ended) over its attempts in flight;
// never later than holdMax.
func TestEndpointLimiterPacesHeldDeliveries(t *testing.T) {
	t.Parallel()
	l, now := testLimiter(2, 20, time.Minute)
	a1, _ := l.acquire("a")
	a2, _ := l.acquire("a")
	_, hold := l.acquire("a")
	require.Equal(t, minHoldStep, hold, "nothing known yet: the least step")

	*now = now.Add(10 * time.Second) // the attempts are 10 s old: a step is 5 s
	var holds []time.Duration
	for range 3 {
		_, h := l.acquire("a")
		holds = append(holds, h)
	}
	require.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second}, holds)

	for range 20 {
		_, h := l.acquire("a")
		require.LessOrEqual(t, h, time.Minute, "never beyond holdMax")
	}
	_, h := l.acquire("a")
	require.Equal(t, time.Minute, h)

	// Past its turns, a fast endpoint's held deliveries come back sooner:
	// the attempts that ended were quick.
	a1.release() // 10 s
	a2.release()
	*now = now.Add(2 * time.Minute)
	s, _ := l.acquire("a")
	require.NotNil(t, s)
	s.release()
	for range 20 {
		s, _ := l.acquire("a")
		s.release()
	}
	_, _ = l.acquire("a")
	_, _ = l.acquire("a")
	s, h = l.acquire("a")
	require.Nil(t, s)
	require.Equal(t, minHoldStep, h, "quick attempts: short turns")
}

// Endpoints with nothing in flight and no turn to come are forgotten.
func TestEndpointLimiterForgetsIdleEndpoints(t *testing.T) {
	t.Parallel()
	l, now := testLimiter(1, 4, time.Minute)
	s, _ := l.acquire("a")
	_, _ = l.acquire("a") // held: a turn 50 ms on
	b, _ := l.acquire("b")
	s.release()
	*now = now.Add(2 * time.Minute)
	c, _ := l.acquire("c")
	require.NotNil(t, c)
	l.mu.Lock()
	_, hasA := l.eps["a"]
	_, hasB := l.eps["b"]
	l.mu.Unlock()
	require.False(t, hasA, "idle, its turns past")
	require.True(t, hasB, "an attempt in flight")
	b.release()
	c.release()
	require.Zero(t, l.inFlight)
}
