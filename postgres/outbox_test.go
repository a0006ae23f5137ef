package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// The relay's queue holds exactly the intents accepted and not yet
// dispatched. An accept that does not commit leaves no row in it; a repeat
// and a parcel taken add none; a dispatch that fails after taking its rows
// (a crash between the statements) gives them back; and relays taking
// batches at once hand each intent over exactly once, oldest first.
func TestIntentQueueDispatchesEachAcceptOnce(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	fixture.Caller(t, pool, "c1")
	opts := postgres.AcceptOpts{LockTimeout: time.Second}
	queued := func() int { return count(t, pool, `SELECT count(*) FROM label_intent_outbox`) }

	crash := errors.New("crash before the commit")
	_, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{fixture.Accept("c1", "k-rolled-back", "lr_rb", 999)},
		postgres.AcceptOpts{LockTimeout: time.Second, BeforeCommitFunc: func(context.Context) error { return crash }})
	require.ErrorIs(t, err, crash)
	require.Zero(t, queued(), "an accept rolled back queues nothing")

	const n = 60
	var want []string
	for i := range n {
		id := fmt.Sprintf("lr_q_%02d", i)
		want = append(want, id)
		outs, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{
			fixture.Accept("c1", fmt.Sprintf("k%d", i), id, int64(i+1)),
			fixture.Accept("c1", fmt.Sprintf("k%d", i), id+"_repeat", int64(i+1)),      // the key exists
			fixture.Accept("c1", fmt.Sprintf("k%d-other", i), id+"_taken", int64(i+1)), // the parcel is taken
		}, opts)
		require.NoError(t, err)
		require.Equal(t, postgres.AcceptStored, outs[0].Result)
		require.Equal(t, postgres.AcceptKeyExists, outs[1].Result)
		require.Equal(t, postgres.AcceptParcelTaken, outs[2].Result)
	}
	require.Equal(t, n, queued(), "one row per stored intent")

	// A dispatch that fails after the rows were taken commits nothing: the
	// rows are back for the next relay.
	var taken []string
	_, err = postgres.DispatchIntents(ctx, pool, 5, func(_ context.Context, _ pgx.Tx, ids []string) error {
		taken = ids
		return crash
	})
	require.ErrorIs(t, err, crash)
	require.Equal(t, want[:5], taken, "oldest first")
	require.Equal(t, n, queued())

	// Three relays at once, in small batches, until the queue is empty.
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				k, err := postgres.DispatchIntents(ctx, pool, 4, func(_ context.Context, _ pgx.Tx, ids []string) error {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, ids...)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				if err != nil || k == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	require.Equal(t, want, got, "every intent dispatched exactly once")
	require.Zero(t, queued())
	k, err := postgres.DispatchIntents(ctx, pool, 4, func(context.Context, pgx.Tx, []string) error {
		t.Error("nothing is left to dispatch")
		return nil
	})
	require.NoError(t, err)
	require.Zero(t, k)
}
