package accept

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/clocktest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// A shared transaction that meets a lock anyway (here a key inserted by a
// session that claims nothing and never commits) fails after the claim wait
// and hands every row back to its caller; tried alone, only the held row
// answers 409 request_in_progress, and the others are stored.
func TestSharedAcceptSplitsOnAHeldKey(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	fixture.HoldKey(t, pool, "c1", "k1")

	a := New(Opts{Pool: pool, ClaimWait: 100 * time.Millisecond})
	rows := []postgres.AcceptRow{fixture.Accept("c1", "k1", "lr_1", 1), fixture.Accept("c1", "k2", "lr_2", 2)}
	res, err := a.acceptMany(ctx, rows)
	require.NoError(t, err)
	require.Equal(t, []rowResult{{alone: true}, {alone: true}}, res)
	_, err = a.acceptAlone(ctx, rows[0])
	require.ErrorIs(t, err, ErrInProgress)
	out, err := a.acceptAlone(ctx, rows[1])
	require.NoError(t, err)
	require.Equal(t, postgres.AcceptStored, out.Result)
}

// The same request under one key, accepted again, is a replay of the first
// intent; another body under the key is key_reused; another key for the same
// parcel and body is a duplicate intent, and with another body the parcel is
// labelled already.
func TestDecisions(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	a := New(Opts{Pool: pool})
	p := fixture.Accept("c1", "k", "lr_x", 7).Intent.Parcel

	first, err := a.Accept(ctx, "c1", "k1", p)
	require.NoError(t, err)
	require.Equal(t, Accepted, first.Outcome)
	other := p
	other.WeightG++
	for _, step := range []struct {
		key    string
		parcel labels.Parcel
		want   Outcome
		sameID bool // answered with the first intent's request id
	}{
		{"k1", p, Replayed, true},
		{"k1", other, KeyReused, false},
		{"k2", p, Duplicate, true},
		{"k3", other, ParcelLabelled, false},
	} {
		d, err := a.Accept(ctx, "c1", step.key, step.parcel)
		require.NoError(t, err, step.key)
		require.Equal(t, step.want, d.Outcome, step.key)
		if step.sameID {
			require.Equal(t, first.Intent.RequestID, d.Intent.RequestID, step.key)
		}
	}
}

// A key seen lately reads first; an unseen key reads first only while more
// than one in eight unseen keys of the last window were stored; the estimate
// follows the share both ways, window by window.
func TestRecentKeys(t *testing.T) {
	t.Parallel()
	r := newRecent()
	read, unseen := r.decide("c1", "k1")
	require.False(t, read, "a new key goes straight to the insert")
	require.True(t, unseen)
	read, unseen = r.decide("c1", "k1")
	require.True(t, read, "a key seen lately reads first")
	require.False(t, unseen, "and does not count in the estimate")
	read, _ = r.decide("c2", "k1")
	require.False(t, read, "keys are per caller")

	n := 0
	fill := func(stored int) {
		for i := range window {
			read, unseen := r.decide("c1", fmt.Sprintf("w%d", n))
			n++
			require.True(t, unseen)
			require.Equal(t, r.readAll.Load(), read)
			r.observe(i < stored)
		}
	}
	fill(readAllAbove) // one in eight: not over
	require.False(t, r.readAll.Load())
	fill(readAllAbove + 1)
	require.True(t, r.readAll.Load())
	read, unseen = r.decide("c1", "fresh")
	require.True(t, read, "every key reads first while many unseen keys were stored")
	require.True(t, unseen, "and still counts, so the estimate can fall again")
	r.observe(false)
	fill(0)
	require.False(t, r.readAll.Load(), "one window under the share turns it off")
}

// Windows close exactly once each under concurrent observers, and what is
// observed while one closes goes to the next.
func TestRecentWindowsConcurrent(t *testing.T) {
	t.Parallel()
	r := newRecent()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range window * 4 {
				r.observe(true)
			}
		})
	}
	wg.Wait()
	require.True(t, r.readAll.Load())
	require.Equal(t, uint64(0), r.counts.Load(), "8 × 4 windows close to nothing left over")
	for range window - 1 {
		r.observe(false)
	}
	require.True(t, r.readAll.Load(), "a window decides only when full")
	r.observe(false)
	require.False(t, r.readAll.Load())
}

// Two accepts arriving within the linger share one transaction (their rows
// carry one xmin), each answered only once it committed; an accept after a
// batch of LingerFew runs at once; and the linger is bounded: when it ends
// with no other accept, the one in hand commits alone. The linger's timer
// is the test's: it expires when the test says.
func TestLingerSharesOneCommit(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := fixture.BeforeDeadline(t)
	a := New(Opts{Pool: pool, Linger: time.Hour})
	ft := clocktest.NewTimer()
	a.shared.Timer, a.shared.LingerFew = ft.Start, 2

	accept := func(key string, order int64) <-chan error {
		done := make(chan error, 1)
		go func() {
			p := fixture.Accept("c1", key, "", order).Intent.Parcel
			d, err := a.Accept(ctx, "c1", key, p)
			if err == nil && d.Outcome != Accepted {
				t.Errorf("%s: %s, want %s", key, d.Outcome, Accepted)
			}
			done <- err
		}()
		return done
	}
	// xmin is the transaction that stored the key; readable only once committed.
	xmin := func(key string) string {
		var x string
		require.NoError(t, pool.QueryRow(ctx, `SELECT xmin::text FROM idempotency_keys WHERE caller_id = 'c1' AND idem_key = $1`, key).Scan(&x))
		return x
	}

	first := accept("k1", 1)
	select {
	case d := <-ft.Started:
		require.Equal(t, time.Hour, d)
	case err := <-first:
		t.Fatalf("the first accept did not linger (err %v)", err)
	}
	second := accept("k2", 2)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.Equal(t, xmin("k1"), xmin("k2"), "the two accepts shared one transaction")

	third := accept("k3", 3)
	select {
	case <-ft.Started:
		t.Fatal("an accept after a batch of LingerFew lingered")
	case err := <-third:
		require.NoError(t, err)
	}

	fourth := accept("k4", 4)
	<-ft.Started // after a batch of one, it lingers again
	ft.Expire()
	require.NoError(t, <-fourth)
	require.NotEqual(t, xmin("k3"), xmin("k4"))
	require.NotEqual(t, xmin("k1"), xmin("k4"))
}
