package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// accepted writes what the accept writes for one parcel: a started key and a
// pending intent. It returns the intent.
func accepted(t *testing.T, pool *pgxpool.Pool, order int64) *postgres.Intent {
	t.Helper()
	row := fixture.Accept("c1", fmt.Sprintf("label:%d:1:v1", order), fmt.Sprintf("lr_batch_%d", order), order)
	outs, err := postgres.Accept(context.Background(), pool, []postgres.AcceptRow{row}, postgres.AcceptOpts{})
	require.NoError(t, err)
	require.Equal(t, postgres.AcceptStored, outs[0].Result)
	return row.Intent
}

// The lease statement leases what nobody holds, and says for every other row
// why not: a live lease, a completed key, the same job twice, no intent.
func TestTakeLeases(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	var ins []*postgres.Intent
	for o := int64(1); o <= 4; o++ {
		ins = append(ins, accepted(t, pool, o))
	}
	// 2 is held by a live lease; 3 is completed (its intent failed).
	_, err := pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() + interval '1 minute', lease_token = gen_random_uuid() WHERE request_id = $1`, ins[1].RequestID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'completed', response_status = 502, response_body = '{}' WHERE request_id = $1`, ins[2].RequestID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE label_intents SET status = 'failed', error = '{}', completed_at = now() WHERE request_id = $1`, ins[2].RequestID)
	require.NoError(t, err)

	toks := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	req := []postgres.LeaseRow{
		{RequestID: ins[0].RequestID, Token: toks[0]}, {RequestID: ins[1].RequestID, Token: toks[1]},
		{RequestID: ins[2].RequestID, Token: toks[2]}, {RequestID: ins[3].RequestID, Token: toks[3]},
		{RequestID: ins[0].RequestID, Token: toks[4]}, // the same job twice
		{RequestID: "lr_missing", Token: uuid.New()},
	}
	outs, err := postgres.TakeLeases(ctx, pool, req, time.Minute)
	require.NoError(t, err)
	require.Len(t, outs, len(req))
	var got []postgres.LeaseResult
	for _, o := range outs {
		got = append(got, o.Result)
	}
	require.Equal(t, []postgres.LeaseResult{postgres.Leased, postgres.LeaseHeld, postgres.LeaseFinal, postgres.Leased,
		postgres.LeaseBusy, postgres.LeaseGone}, got)
	for i, want := range []bool{true, false, false, true, false, false} {
		require.Equal(t, want, outs[i].Intent != nil, "job %d", i)
	}
	require.Equal(t, ins[0].Parcel, outs[0].Intent.Parcel)
	require.Equal(t, ins[0].CarrierKey, outs[0].Intent.CarrierKey)
	require.Equal(t, labels.StatusPending, outs[0].Intent.Status)
	require.Equal(t, 1, outs[0].Attempt)
	require.False(t, outs[0].Takeover)
	require.WithinDuration(t, time.Now().Add(time.Minute), outs[1].HeldUntil, 30*time.Second, "the live lease's end")
	require.Equal(t, "c1", outs[1].CallerID)
	require.Equal(t, ins[1].Key, outs[1].Key)
	require.Equal(t, toks[0], dbtest.Scalar[uuid.UUID](t, pool, `SELECT lease_token FROM idempotency_keys WHERE request_id = $1`, ins[0].RequestID))
	require.Equal(t, 1, dbtest.Scalar[int](t, pool, `SELECT attempts FROM idempotency_keys WHERE request_id = $1`, ins[0].RequestID))
	require.True(t, dbtest.Scalar[bool](t, pool, `SELECT attempts IS NULL FROM idempotency_keys WHERE request_id = $1`, ins[1].RequestID), "no attempt counted without the lease")
	require.True(t, dbtest.Scalar[bool](t, pool, `SELECT attempts IS NULL FROM idempotency_keys WHERE request_id = $1`, ins[2].RequestID))

	// An expired lease is taken over, and the attempt counted again.
	_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 ms' WHERE request_id = $1`, ins[3].RequestID)
	require.NoError(t, err)
	tok := uuid.New()
	outs, err = postgres.TakeLeases(ctx, pool, []postgres.LeaseRow{{RequestID: ins[3].RequestID, Token: tok}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, postgres.Leased, outs[0].Result)
	require.True(t, outs[0].Takeover)
	require.Equal(t, 2, outs[0].Attempt)
	require.Equal(t, tok, dbtest.Scalar[uuid.UUID](t, pool, `SELECT lease_token FROM idempotency_keys WHERE request_id = $1`, ins[3].RequestID))
}

// A key row that another session holds (a worker frozen inside its
// transaction) is skipped, not waited for: only its own row is busy, and the
// others of the statement are leased at once.
func TestTakeLeasesSkipsALockedRow(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	a, b := accepted(t, pool, 1), accepted(t, pool, 2)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE request_id = $1 FOR UPDATE`, a.RequestID)
	require.NoError(t, err)

	outs, err := postgres.TakeLeases(ctx, pool, []postgres.LeaseRow{{RequestID: a.RequestID, Token: uuid.New()}, {RequestID: b.RequestID, Token: uuid.New()}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, postgres.LeaseBusy, outs[0].Result)
	require.Equal(t, postgres.Leased, outs[1].Result)
	require.NoError(t, tx.Rollback(ctx))
	outs, err = postgres.TakeLeases(ctx, pool, []postgres.LeaseRow{{RequestID: a.RequestID, Token: uuid.New()}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, postgres.Leased, outs[0].Result, "leased once the lock is gone")
}

// Release gives back only the attempt's own lease.
func TestRelease(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	in := accepted(t, pool, 1)
	tok := uuid.New()
	outs, err := postgres.TakeLeases(ctx, pool, []postgres.LeaseRow{{RequestID: in.RequestID, Token: tok}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, postgres.Leased, outs[0].Result)
	require.NoError(t, postgres.Release(ctx, pool, []postgres.Lease{{CallerID: "c1", Key: in.Key, Token: uuid.New()}}, time.Second))
	require.True(t, dbtest.Scalar[bool](t, pool, `SELECT lease_token IS NOT NULL FROM idempotency_keys WHERE request_id = $1`, in.RequestID), "another's token releases nothing")
	require.NoError(t, postgres.Release(ctx, pool, []postgres.Lease{{CallerID: "c1", Key: in.Key, Token: tok}}, time.Second))
	require.True(t, dbtest.Scalar[bool](t, pool, `SELECT lease_token IS NULL AND locked_until IS NULL FROM idempotency_keys WHERE request_id = $1`, in.RequestID))
}
