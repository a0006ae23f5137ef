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
			out, err := g.Do(v)
			require.NoError(t, err)
			require.Equal(t, 2*v, out)
		})
	}
	wg.Wait()
	require.Equal(t, 200, calls)
	_, err := g.Do(-1)
	require.EqualError(t, err, "negative")
}
