package failovertest_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/failovertest"
	"github.com/labelkit/labels/postgres"
)

func start(t *testing.T, opts failovertest.Options) *failovertest.Formation {
	t.Helper()
	failovertest.SkipUnlessAvailable(t)
	return failovertest.Start(t, opts)
}

// appPool is a pool on url configured as the services configure theirs.
func appPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := postgres.PoolConfig(url)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func scalar[T any](t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) T {
	t.Helper()
	var v T
	require.NoError(t, q.QueryRow(context.Background(), sql, args...).Scan(&v), sql)
	return v
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// The primary's machine is lost right after a commit returned, without
// waiting for replay: the monitor promotes the synchronous standby, which
// has the commit. The old primary comes back as the standby of the new one,
// and a switchover gives it the primary's role back.
func TestFailoverRejoinSwitchover(t *testing.T) {
	f := start(t, failovertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := appPool(t, f.CreateDatabase("ha"))

	// What the manager set, as the service's own sessions see it: a commit
	// waits until the standby has flushed it.
	require.Equal(t, "on", scalar[string](t, pool, `SHOW synchronous_commit`))
	require.NotEmpty(t, scalar[string](t, pool, `SHOW synchronous_standby_names`))

	_, err := pool.Exec(ctx, `CREATE TABLE acked (id int PRIMARY KEY)`)
	require.NoError(t, err)
	for i := range 20 {
		_, err := pool.Exec(ctx, `INSERT INTO acked VALUES ($1)`, i)
		require.NoError(t, err)
	}
	old := f.Primary()

	killed := time.Now()
	require.Equal(t, old, f.KillPrimary())
	promoted := f.WaitPrimary(ctx)
	t.Logf("failover: %s killed, %s accepts writes %.1f s later", old.Name, promoted.Name, time.Since(killed).Seconds())
	require.NotEqual(t, old.Name, promoted.Name)
	require.Equal(t, 20, scalar[int](t, pool, `SELECT count(*) FROM acked`), "every acknowledged commit is on the promoted standby")
	_, err = pool.Exec(ctx, `INSERT INTO acked VALUES (20)`)
	require.NoError(t, err)

	f.Restart(old)
	f.WaitHealthy(ctx)
	t.Logf("after the rejoin:\n%s", f.State(ctx))
	require.Equal(t, promoted, f.Primary())
	f.WaitReplayed(ctx)
	rejoined := connect(t, old.URL("ha"))
	require.True(t, scalar[bool](t, rejoined, `SELECT pg_is_in_recovery()`), "the old primary is a standby")
	require.Equal(t, 21, scalar[int](t, rejoined, `SELECT count(*) FROM acked`))

	f.Switchover(ctx)
	require.Equal(t, old, f.Primary())
	_, err = pool.Exec(ctx, `INSERT INTO acked VALUES (21)`)
	require.NoError(t, err, "the pool follows the switchover")
	require.Equal(t, old.Port, scalar[int](t, pool, `SELECT current_setting('port')::int`))
}

// A commit does not return before the synchronous standby has flushed it:
// with the standby's WAL receiver stopped (SIGSTOP), the commit waits
// (wait event SyncRep) and returns once it runs again.
func TestCommitWaitsForTheStandby(t *testing.T) {
	f := start(t, failovertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := appPool(t, f.CreateDatabase("ha"))
	_, err := pool.Exec(ctx, `CREATE TABLE acked (id int PRIMARY KEY)`)
	require.NoError(t, err)
	f.WaitHealthy(ctx)

	primary := f.Primary()
	var standby failovertest.Node
	for _, n := range f.Core().Nodes() {
		if n.Name != primary.Name {
			standby = n
		}
	}
	receiver := scalar[int](t, connect(t, standby.URL("postgres")), `SELECT pid FROM pg_stat_wal_receiver`)
	require.NoError(t, syscall.Kill(receiver, syscall.SIGSTOP))
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(receiver, syscall.SIGCONT)
		}
	}()

	done := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, `INSERT INTO acked VALUES (1)`)
		done <- err
	}()
	watch := connect(t, primary.URL("postgres"))
	for scalar[int](t, watch, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND datname = 'ha'`) == 0 {
		select {
		case err := <-done:
			t.Fatalf("the commit returned (%v) while the standby's WAL receiver was stopped", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.NoError(t, syscall.Kill(receiver, syscall.SIGCONT))
	resumed = true
	require.NoError(t, <-done)
	// The standby has flushed the commit; it shows once replayed.
	f.WaitReplayed(ctx)
	require.Equal(t, 1, scalar[int](t, connect(t, standby.URL("ha")), `SELECT count(*) FROM acked`))
}

// With Async the primary names no synchronous standby: a commit returns
// without waiting for it.
func TestAsyncStandby(t *testing.T) {
	f := start(t, failovertest.Options{Async: true})
	pool := appPool(t, f.CreateDatabase("ha"))
	require.Empty(t, scalar[string](t, pool, `SHOW synchronous_standby_names`))
	require.Equal(t, "async", scalar[string](t, connect(t, f.Primary().URL("postgres")), `SELECT sync_state FROM pg_stat_replication`))
}

// When the synchronous standby is lost, the monitor moves the primary to
// wait_primary and drops synchronous replication (an empty
// synchronous_standby_names), so commits go on without a standby, and says
// so in its events; the standby's return makes replication synchronous
// again.
func TestStandbyLossDropsToAsync(t *testing.T) {
	f := start(t, failovertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := appPool(t, f.CreateDatabase("ha"))
	primary := f.Primary()
	var standby failovertest.Node
	for _, n := range f.Core().Nodes() {
		if n.Name != primary.Name {
			standby = n
		}
	}
	require.NoError(t, f.Core().Kill(ctx, standby))
	for scalar[string](t, pool, `SHOW synchronous_standby_names`) != "" {
		select {
		case <-ctx.Done():
			t.Fatalf("the primary still names a synchronous standby:\n%s", f.State(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, err := pool.Exec(ctx, `CREATE TABLE after_loss (id int)`)
	require.NoError(t, err, "a commit without the standby")
	events, err := f.Core().Events(ctx, 10)
	require.NoError(t, err)
	t.Logf("the monitor's events:\n%s", events)
	require.Contains(t, events, "wait_primary")
	require.Equal(t, primary, f.Primary())

	f.Restart(standby)
	f.WaitHealthy(ctx)
	require.NotEmpty(t, scalar[string](t, pool, `SHOW synchronous_standby_names`))
}
