package accept

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
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
