package httpapi

import (
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// The adaptive policy: a key seen lately reads first; an unseen key reads
// first only while more than one in eight unseen keys of the last window were
// stored; the estimate follows the share both ways, window by window.
func TestReadFirstPolicy(t *testing.T) {
	t.Parallel()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "read_all"})
	p := newReadFirstPolicy(ReadFirstAdaptive, gauge)

	read, unseen := p.decide("c1", "k1")
	require.False(t, read, "a new key goes straight to the insert")
	require.True(t, unseen)
	read, unseen = p.decide("c1", "k1")
	require.True(t, read, "a key seen lately reads first")
	require.False(t, unseen, "and does not count in the estimate")
	read, _ = p.decide("c2", "k1")
	require.False(t, read, "keys are per caller")

	n := 0
	fill := func(stored int) {
		for i := range window {
			read, unseen := p.decide("c1", fmt.Sprintf("w%d", n))
			n++
			require.True(t, unseen)
			require.Equal(t, p.readAll.Load(), read)
			p.observe(i < stored)
		}
	}
	fill(readAllAbove) // one in eight: not over
	require.False(t, p.readAll.Load())
	require.Equal(t, 0.0, testutil.ToFloat64(gauge))
	fill(readAllAbove + 1)
	require.True(t, p.readAll.Load())
	require.Equal(t, 1.0, testutil.ToFloat64(gauge))
	read, unseen = p.decide("c1", "fresh")
	require.True(t, read, "every key reads first while many unseen keys were stored")
	require.True(t, unseen, "and still counts, so the estimate can fall again")
	p.observe(false)
	fill(0)
	require.False(t, p.readAll.Load(), "one window under the share turns it off")
	require.Equal(t, 0.0, testutil.ToFloat64(gauge))

	for mode, want := range map[ReadFirst]bool{ReadFirstAlways: true, ReadFirstNever: false} {
		p := newReadFirstPolicy(mode, prometheus.NewGauge(prometheus.GaugeOpts{Name: "read_all"}))
		for range 2 {
			read, unseen := p.decide("c1", "k1")
			require.Equal(t, want, read)
			require.False(t, unseen)
		}
	}
}

// Windows close exactly once each under concurrent observers, and what is
// observed while one closes goes to the next.
func TestReadFirstWindowsConcurrent(t *testing.T) {
	t.Parallel()
	p := newReadFirstPolicy(ReadFirstAdaptive, prometheus.NewGauge(prometheus.GaugeOpts{Name: "read_all"}))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range window * 4 {
				p.observe(true)
			}
		})
	}
	wg.Wait()
	require.True(t, p.readAll.Load())
	c := p.counts.Load()
	require.Equal(t, uint64(0), c, "8 × 4 windows close to nothing left over")
	for range window - 1 {
		p.observe(false)
	}
	require.True(t, p.readAll.Load(), "a window decides only when full")
	p.observe(false)
	require.False(t, p.readAll.Load())
}
