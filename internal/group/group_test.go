package group

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A group runs each call once, hands each caller its own result, and fails
// every call of a batch that failed.
func TestGroup(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls int
	g := &Group[int, int]{Max: 8, Flushers: 2, Timeout: time.Second, Run: func(_ context.Context, ins []int) ([]int, error) {
		mu.Lock()
		calls += len(ins)
		mu.Unlock()
		outs := make([]int, len(ins))
		for i, v := range ins {
			if v < 0 {
				return nil, errors.New("negative")
			}
			outs[i] = v * 2
		}
		return outs, nil
	}}
	var wg sync.WaitGroup
	for v := range 200 {
		wg.Go(func() {
			out, err := g.Do(context.Background(), v)
			require.NoError(t, err)
			require.Equal(t, 2*v, out)
		})
	}
	wg.Wait()
	require.Equal(t, 200, calls)
	_, err := g.Do(context.Background(), -1)
	require.EqualError(t, err, "negative")
}

// A call whose context ends leaves at once, whether it waits in the queue
// behind a batch that does not finish or in that batch itself, and a queued
// call that was left is never run.
func TestCallLeavesWithItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	var ran []int
	g := &Group[int, int]{Max: 1, Flushers: 1, Timeout: time.Minute, Run: func(ctx context.Context, ins []int) ([]int, error) {
		mu.Lock()
		ran = append(ran, ins...)
		mu.Unlock()
		<-release
		return ins, nil
	}}
	stuck := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			for {
				mu.Lock()
				n := len(ran)
				mu.Unlock()
				if n > 0 {
					cancel() // leave the running batch
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		_, err := g.Do(ctx, 1)
		stuck <- err
	}()
	require.ErrorIs(t, <-stuck, context.Canceled, "the caller in the running batch leaves")

	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan error, 1)
	go func() { _, err := g.Do(ctx, 2); queued <- err }()
	cancel()
	require.ErrorIs(t, <-queued, context.Canceled, "the queued caller leaves")

	close(release)
	out, err := g.Do(context.Background(), 3)
	require.NoError(t, err)
	require.Equal(t, 3, out)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 3}, ran, "the call left in the queue was never run")
}
