package accept

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// A concurrent request that holds one key of a shared transaction past the
// claim wait costs only that accept its answer (409 request_in_progress): the
// rows are then stored one by one, and the others are stored.
func TestSharedAcceptSplitsOnAHeldKey(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	fixture.Caller(t, pool, "c1")
	fixture.HoldKey(t, pool, "c1", "k1")

	a := New(Opts{Pool: pool, ClaimWait: 100 * time.Millisecond})
	res, err := a.acceptMany(ctx, []postgres.AcceptRow{fixture.Accept("c1", "k1", "lr_1", 1), fixture.Accept("c1", "k2", "lr_2", 2)})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].err, ErrInProgress)
	require.NoError(t, res[1].err)
	require.Equal(t, postgres.AcceptStored, res[1].out.Result)
}

// The same request under one key, accepted again, is a replay of the first
// intent; another body under the key is key_reused; another key for the same
// parcel and body is a duplicate intent, and with another body the parcel is
// labelled already.
func TestDecisions(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	fixture.Caller(t, pool, "c1")
	a := New(Opts{Pool: pool})
	p := fixture.Accept("c1", "k", "lr_x", 7).Intent.Parcel

	first, err := a.Accept(ctx, "c1", "k1", p)
	require.NoError(t, err)
	require.Equal(t, Accepted, first.Outcome)
	again, err := a.Accept(ctx, "c1", "k1", p)
	require.NoError(t, err)
	require.Equal(t, Replayed, again.Outcome)
	require.Equal(t, first.Intent.RequestID, again.Intent.RequestID)

	other := p
	other.WeightG++
	reused, err := a.Accept(ctx, "c1", "k1", other)
	require.NoError(t, err)
	require.Equal(t, KeyReused, reused.Outcome)

	dup, err := a.Accept(ctx, "c1", "k2", p)
	require.NoError(t, err)
	require.Equal(t, Duplicate, dup.Outcome)
	require.Equal(t, first.Intent.RequestID, dup.Intent.RequestID)
	taken, err := a.Accept(ctx, "c1", "k3", other)
	require.NoError(t, err)
	require.Equal(t, ParcelLabelled, taken.Outcome)
}
