package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/outbox"
	"github.com/labelkit/labels/postgres"
)

// The relay's take gives the callers turns: every caller's oldest queued
// intent before any caller's second, round robin within a turn from the
// caller after the one served last, a caller no more than its share of the
// batch; and with a bound on River's backlog it takes only what brings the
// jobs waiting to run up to the bound, more once jobs start.
func TestDispatchTakesCallersInTurns(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "a", "b", "c")
	ctx := context.Background()
	accept := func(caller string, n int) []string {
		t.Helper()
		var ids []string
		for i := range n {
			id := fmt.Sprintf("lr_%s%02d", caller, i)
			_, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{fixture.Accept(caller, "k"+id, id, int64(i+1))},
				postgres.AcceptOpts{LockTimeout: time.Second})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		return ids
	}
	// a's burst first, then b's two and c's one.
	a, b, c := accept("a", 20), accept("b", 2), accept("c", 1)

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	insert := outbox.InsertBuyLabels(client)
	var got [][]string
	last := ""
	take := func(o outbox.DispatchOpts) outbox.Dispatched {
		t.Helper()
		o.Queue, o.After = jobs.QueueLabels, last
		d, err := outbox.DispatchIntents(ctx, pool, o, func(ctx context.Context, tx pgx.Tx, ids []string, meta [][]byte) error {
			got = append(got, ids)
			return insert(ctx, tx, ids, meta)
		})
		require.NoError(t, err)
		last = d.Last
		return d
	}

	// A batch of 6 among 3 callers: at most 2 each, first turns first.
	d := take(outbox.DispatchOpts{Batch: 6})
	require.Equal(t, []string{a[0], b[0], c[0], a[1], b[1]}, got[0])
	require.Equal(t, outbox.Dispatched{Taken: 5, Room: 6, Left: true, Last: "b"}, d)

	// River holds 5 jobs waiting; a bound of 8 leaves room for 3.
	d = take(outbox.DispatchOpts{Batch: 6, Backlog: 8})
	require.Equal(t, a[2:5], got[1])
	require.Equal(t, outbox.Dispatched{Taken: 3, Room: 3, Left: true, Last: "a"}, d)
	d = take(outbox.DispatchOpts{Batch: 6, Backlog: 8})
	require.Equal(t, outbox.Dispatched{Taken: 0, Room: 0, Left: true, Last: "a"}, d, "River's backlog is at its bound")

	// b's next two intents arrive behind a's burst. As jobs start one at a
	// time, the room of one goes to b and a in turn: b's wait for one of
	// a's each, not for the burst.
	late := accept("b", 4)[2:]
	start := func() {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempted_at = now()
			WHERE id = (SELECT min(id) FROM river_job WHERE state = 'available')`)
		require.NoError(t, err)
	}
	for _, want := range []string{late[0], a[5], late[1], a[6]} {
		start()
		d = take(outbox.DispatchOpts{Batch: 6, Backlog: 8})
		require.Equal(t, []string{want}, got[len(got)-1])
		require.Equal(t, 1, d.Taken)
	}

	// No bound: the rest, a's alone.
	d = take(outbox.DispatchOpts{Batch: 100})
	require.Equal(t, a[7:], got[len(got)-1])
	require.Equal(t, outbox.Dispatched{Taken: 13, Room: 100, Left: false, Last: "a"}, d)
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM label_intent_outbox`))
	require.Equal(t, 25, dbtest.Scalar[int](t, pool, `SELECT count(DISTINCT args->>'request_id') FROM river_job`))
}

// The relay's queue holds exactly the intents accepted and not yet
// dispatched. An accept that does not commit leaves no row in it; a repeat
// and a parcel taken add none; a dispatch that fails after taking its rows
// (a crash between the statements) gives them back; and relays taking
// batches at once hand each intent over exactly once, oldest first.
func TestIntentQueueDispatchesEachAcceptOnce(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	opts := postgres.AcceptOpts{LockTimeout: time.Second}
	queued := func() int { return dbtest.Scalar[int](t, pool, `SELECT count(*) FROM label_intent_outbox`) }

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
	_, err = outbox.DispatchIntents(ctx, pool, outbox.DispatchOpts{Batch: 5}, func(_ context.Context, _ pgx.Tx, ids []string, _ [][]byte) error {
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
				d, err := outbox.DispatchIntents(ctx, pool, outbox.DispatchOpts{Batch: 4}, func(_ context.Context, _ pgx.Tx, ids []string, _ [][]byte) error {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, ids...)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				if err != nil || d.Taken == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	require.Equal(t, want, got, "every intent dispatched exactly once")
	require.Zero(t, queued())
	d, err := outbox.DispatchIntents(ctx, pool, outbox.DispatchOpts{Batch: 4}, func(context.Context, pgx.Tx, []string, [][]byte) error {
		t.Error("nothing is left to dispatch")
		return nil
	})
	require.NoError(t, err)
	require.Zero(t, d.Taken)
	require.False(t, d.Left)
}
