package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// Stored rows that another session holds (a worker frozen inside its lease
// or completion, the sweeper's purge in flight) are waited for by no row of
// an accept: the repeat of a held key finds it existing, a new key for a
// parcel whose intent is held finds the parcel taken, a key being deleted
// still exists, and a new row beside them is stored. The lock timeout is
// longer than the test: a statement that waited for the holder would not
// return while it holds the rows.
func TestAcceptWaitsForNoHeldRow(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	_, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{
		fixture.Accept("c1", "k1", "lr_1", 1), fixture.Accept("c1", "k2", "lr_2", 2), fixture.Accept("c1", "k3", "lr_3", 3),
	}, postgres.AcceptOpts{})
	require.NoError(t, err)

	holder, _ := dbtest.HoldingSession(t, pool.Config().ConnString())
	for _, sql := range []string{
		`UPDATE idempotency_keys SET locked_until = now() + interval '1 hour', lease_token = gen_random_uuid() WHERE idem_key = 'k1'`,
		`DELETE FROM idempotency_keys WHERE idem_key = 'k2'`,
		`UPDATE label_intents SET status = 'failed', error = '{}', completed_at = now() WHERE idem_key = 'k3'`,
	} {
		_, err := holder.Exec(ctx, sql)
		require.NoError(t, err)
	}

	outs, err := postgres.Accept(fixture.BeforeDeadline(t), pool, []postgres.AcceptRow{
		fixture.Accept("c1", "k1", "lr_k1_again", 1), // its key row is held
		fixture.Accept("c1", "k2", "lr_k2_again", 2), // its key row is being deleted
		fixture.Accept("c1", "k4", "lr_4", 3),        // k3's parcel, whose intent row is held
		fixture.Accept("c1", "k5", "lr_5", 5),        // new
	}, postgres.AcceptOpts{LockTimeout: time.Hour})
	require.NoError(t, err, "the statement waited for a held row until the test's deadline")
	require.Equal(t, []postgres.AcceptOutcome{
		{Result: postgres.AcceptKeyExists}, {Result: postgres.AcceptKeyExists}, {Result: postgres.AcceptParcelTaken}, {Result: postgres.AcceptStored},
	}, withoutTimes(outs))
	require.Zero(t, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM idempotency_keys WHERE idem_key = 'k4'`), "nothing stored for a taken parcel")
	require.Equal(t, "idle in transaction", dbtest.Scalar[string](t, pool, `SELECT state FROM pg_stat_activity WHERE pid = $1`, holder.PgConn().PID()),
		"the rows were held throughout")
}

// An accept of a key or of a parcel that has not committed (its claims held)
// makes the rows of another accept with that key or parcel busy, at once,
// while a row beside them is stored. Tried again with Wait, such a row waits
// for the claim: it fails after the lock timeout while the claim is held, and
// finds the key existing once the first accept has committed.
func TestAcceptInFlightIsBusy(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := context.Background()
	commit, firstDone := fixture.AcceptHeld(t, ctx, pool, fixture.Accept("c1", "k1", "lr_1", 1))

	outs, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{
		fixture.Accept("c1", "k1", "lr_k1_again", 1), // the key in flight
		fixture.Accept("c1", "k2", "lr_2", 1),        // another key for the parcel in flight
		fixture.Accept("c1", "k3", "lr_3", 3),        // new
	}, postgres.AcceptOpts{LockTimeout: time.Hour})
	require.NoError(t, err)
	require.Equal(t, []postgres.AcceptOutcome{{Result: postgres.AcceptBusy}, {Result: postgres.AcceptBusy}, {Result: postgres.AcceptStored}}, withoutTimes(outs))

	_, err = postgres.Accept(ctx, pool, []postgres.AcceptRow{fixture.Accept("c1", "k2", "lr_2", 1)},
		postgres.AcceptOpts{LockTimeout: 10 * time.Millisecond, Wait: true})
	require.True(t, postgres.IsLockTimeout(err), "the claim is held past the lock timeout: %v", err)

	waited := make(chan []postgres.AcceptOutcome, 1)
	go func() {
		outs, err := postgres.Accept(ctx, pool, []postgres.AcceptRow{fixture.Accept("c1", "k1", "lr_k1_again", 1)},
			postgres.AcceptOpts{LockTimeout: time.Hour, Wait: true})
		assertNoError(t, err)
		waited <- outs
	}()
	waitUntil(t, pool, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'advisory')`)
	commit()
	require.NoError(t, <-firstDone)
	require.Equal(t, []postgres.AcceptOutcome{{Result: postgres.AcceptKeyExists}}, withoutTimes(<-waited))
}

// withoutTimes returns outs with their transaction times zeroed, for the
// tests that compare outcomes only.
func withoutTimes(outs []postgres.AcceptOutcome) []postgres.AcceptOutcome {
	for i := range outs {
		outs[i].At = time.Time{}
	}
	return outs
}

// waitUntil polls a query of one boolean until it is true.
func waitUntil(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	for !dbtest.Scalar[bool](t, pool, sql) {
		time.Sleep(10 * time.Millisecond)
	}
}

// assertNoError fails t from any goroutine.
func assertNoError(t *testing.T, err error) {
	if err != nil {
		t.Error(err)
	}
}
