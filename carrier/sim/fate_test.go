package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDrawLatencyJitter(t *testing.T) {
	t.Parallel()

	s, err := New(&Options{Latency: 10 * time.Millisecond, LatencyJitter: 5 * time.Millisecond, Seed: 1})
	require.NoError(t, err)
	seen := map[time.Duration]bool{}
	for range 100 {
		f := s.drawLocked()
		require.GreaterOrEqual(t, f.latency, 10*time.Millisecond)
		require.Less(t, f.latency, 15*time.Millisecond)
		seen[f.latency] = true
	}
	require.Greater(t, len(seen), 50, "the jitter varies")

	s2, err := New(&Options{Latency: 10 * time.Millisecond, LatencyJitter: 5 * time.Millisecond, Seed: 1})
	require.NoError(t, err)
	s3, err := New(&Options{Latency: 10 * time.Millisecond, LatencyJitter: 5 * time.Millisecond, Seed: 1})
	require.NoError(t, err)
	for range 10 {
		require.Equal(t, s2.drawLocked(), s3.drawLocked(), "the same seed draws the same fates")
	}
}

func TestDrawRates(t *testing.T) {
	t.Parallel()

	s, err := New(&Options{FailRate: 0.25, TimeoutRate: 0.5, DropReplyRate: 0.75, Seed: 2})
	require.NoError(t, err)
	var fail, timeout, drop int
	const n = 10_000
	for range n {
		f := s.drawLocked()
		if f.fail {
			fail++
		}
		if f.timeout {
			timeout++
		}
		if f.drop {
			drop++
		}
	}
	require.InDelta(t, 0.25, float64(fail)/n, 0.03)
	require.InDelta(t, 0.5, float64(timeout)/n, 0.03)
	require.InDelta(t, 0.75, float64(drop)/n, 0.03)
}

func TestULIDLike(t *testing.T) {
	t.Parallel()

	s, err := New(nil)
	require.NoError(t, err)
	id := ulidLike(time.UnixMilli(0), s.rng)
	require.Len(t, id, 26)
	require.Equal(t, "0000000000", id[:10], "a zero time is ten zero characters")
	later := ulidLike(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), s.rng)
	require.Greater(t, later, id, "ids sort by time")
}
