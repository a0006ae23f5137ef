package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// One accept statement with, side by side: new accepts, a key that exists, a
// parcel that is taken, and two rows of the call with the same key and with
// the same parcel. Each gets what it would have had alone, and nothing is
// stored for those that were not new.
func TestAcceptOutcomes(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	opts := postgres.AcceptOpts{LockTimeout: time.Second}
	n := 0
	mk := func(key string, order int64) postgres.AcceptRow {
		n++
		return fixture.Accept("c1", key, fmt.Sprintf("lr_many_%d", n), order)
	}
	first, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{mk("k1", 1), mk("k2", 2)}, opts)
	require.NoError(t, err)
	// The rows' times are the transaction's now(), which every outcome carries.
	at := first[0].At
	require.False(t, at.IsZero())
	require.Equal(t, 2, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_keys k JOIN label_intents i USING (request_id)
		WHERE k.created_at = $1 AND i.created_at = $1 AND k.expires_at = $1::timestamptz + interval '1 hour'`, at))
	require.Equal(t, []postgres.AcceptOutcome{{Result: postgres.AcceptStored, At: at}, {Result: postgres.AcceptStored, At: at}}, first)

	batch := []postgres.AcceptRow{
		mk("k3", 3), // new
		mk("k1", 1), // the key exists
		mk("k4", 2), // a new key for a parcel that is taken
		mk("k3", 3), // the same key again in the call
		mk("k5", 3), // the same parcel again in the call
		mk("k6", 6), // new
		mk("k2", 9), // the key exists (with another body)
	}
	outs, err := postgres.Accept(ctx, pool, batch, opts)
	require.NoError(t, err)
	var got []postgres.AcceptResult
	for _, o := range outs {
		got = append(got, o.Result)
		require.False(t, o.PurgedBefore)
	}
	require.Equal(t, []postgres.AcceptResult{
		postgres.AcceptStored, postgres.AcceptKeyExists, postgres.AcceptParcelTaken,
		postgres.AcceptKeyExists, postgres.AcceptParcelTaken, postgres.AcceptStored, postgres.AcceptKeyExists,
	}, got)
	require.Equal(t, 4, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_keys`), "2 before, 2 new; none for a taken parcel")
	require.Equal(t, 4, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM label_intents`))
	require.Equal(t, 0, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_keys k WHERE NOT EXISTS (SELECT 1 FROM label_intents i WHERE i.request_id = k.request_id)`))
	require.Equal(t, 0, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_keys WHERE idem_key IN ('k4', 'k5')`))
	require.Equal(t, 1, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_keys WHERE idem_key = 'k1' AND request_id = 'lr_many_1'`),
		"an existing key is left as it was")
	require.Equal(t, 1, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_keys WHERE idem_key = 'k3' AND request_id = $1`, batch[0].Key.RequestID),
		"the first row of a key stores it")
}

// A key purged before (a tombstone matches) is reported, and accepted anew.
func TestAcceptSeesTombstones(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO idempotency_tombstones (caller_id, key_hash, purged_at) VALUES ('c1', sha256('old'::bytea), now())`)
	require.NoError(t, err)
	outs, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{fixture.Accept("c1", "old", "lr_1", 1), fixture.Accept("c1", "new", "lr_2", 2)}, postgres.AcceptOpts{})
	require.NoError(t, err)
	at := outs[0].At
	require.Equal(t, []postgres.AcceptOutcome{{Result: postgres.AcceptStored, PurgedBefore: true, At: at}, {Result: postgres.AcceptStored, At: at}}, outs)
}

// A failure before the commit stores nothing of any row.
func TestAcceptIsOneTransaction(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	_, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{fixture.Accept("c1", "k1", "lr_1", 1), fixture.Accept("c1", "k2", "lr_2", 2)},
		postgres.AcceptOpts{BeforeCommitFunc: func(context.Context) error { return fmt.Errorf("crash") }})
	require.EqualError(t, err, "crash")
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_keys`))
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM label_intents`))
}

// A key held by a transaction that has not committed makes the statement
// wait at most its lock timeout.
func TestAcceptLockTimeout(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	fixture.HoldKey(t, pool, "c1", "k1")
	_, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{fixture.Accept("c1", "k1", "lr_1", 1)}, postgres.AcceptOpts{LockTimeout: 100 * time.Millisecond})
	require.True(t, postgres.IsLockTimeout(err), "%v", err)
}
