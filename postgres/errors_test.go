package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/postgres"
)

// Unavailable tells a database that cannot be reached or is overloaded from a
// statement that failed, on errors a real server gives: a connect refused with
// any SQLSTATE, a session ended under a pool, a closed pool, a statement
// timeout, against a constraint violation and a syntax error.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	pool, url := dbtest.New(t)
	ctx := context.Background()
	name := pool.Config().ConnConfig.Database

	// Statements at fault are not.
	_, err := pool.Exec(ctx, `SELECT * FROM no_such_table`)
	require.Error(t, err)
	require.False(t, postgres.Unavailable(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT 1/0`)
	require.False(t, postgres.Unavailable(err), "%v", err)
	_, err = pool.Exec(ctx, `INSERT INTO callers (caller_id) VALUES ('c'), ('c')`)
	require.False(t, postgres.Unavailable(err), "%v", err)
	require.False(t, postgres.Unavailable(nil))
	require.False(t, postgres.Unavailable(errors.New("anything else")))

	// A statement timeout (57014) and a lock timeout (55P03) are overload.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL statement_timeout = '10ms'; SELECT pg_sleep(10)`)
	require.True(t, postgres.Unavailable(err), "%v", err)
	require.NoError(t, tx.Rollback(ctx))

	// A session ended by the server while the pool held it.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	pid := conn.Conn().PgConn().PID()
	admin, err := pgx.Connect(ctx, dbtest.AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	var ended bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_terminate_backend($1, 30000)`, pid).Scan(&ended))
	require.True(t, ended)
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.True(t, postgres.Unavailable(err), "%v", err)
	_, err = conn.Exec(ctx, `SELECT 1`) // the connection pgx closed after that
	require.True(t, postgres.Unavailable(err), "%v", err)
	conn.Release()

	// A database that refuses connections: 55000 on connect, a PgError inside a ConnectError.
	_, err = admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS false`, pgx.Identifier{name}.Sanitize()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS true`, pgx.Identifier{name}.Sanitize()))
	})
	_, err = pgx.Connect(ctx, url)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55000", pgErr.Code)
	require.True(t, postgres.Unavailable(err), "%v", err)
	fresh, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	err = fresh.Ping(ctx)
	require.True(t, postgres.Unavailable(err), "%v", err)
	fresh.Close()
	err = fresh.Ping(ctx)
	require.True(t, postgres.Unavailable(err), "closed pool: %v", err)

	// Nothing listens: a network error inside a ConnectError.
	_, err = pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/x?connect_timeout=5")
	require.True(t, postgres.Unavailable(err), "%v", err)

	// A deadline, and a caller gone.
	dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-dctx.Done()
	_, err = pool.Exec(dctx, `SELECT 1`)
	require.True(t, postgres.Unavailable(err), "%v", err)
}

// The server's codes by class, as a session or a pooler may send them.
func TestUnavailableCodes(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"08006": true, "08P01": true, "53300": true, "53100": true, "57P01": true, "57P03": true, "58030": true,
		"40001": true, "40P01": true, "55P03": true, "25006": true,
		"55000": false, "23505": false, "42P01": false, "22012": false, "25P02": false,
	} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code})
		require.Equal(t, want, postgres.Unavailable(err), code)
	}
	// Whatever the code, a FATAL ends the session.
	require.True(t, postgres.Unavailable(&pgconn.PgError{SeverityUnlocalized: "FATAL", Code: "25P03"}))
}
