package replicatest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/replicatest"
	"github.com/labelkit/labels/postgres"
)

// What the primary committed before the kill is on the promoted standby,
// and the multi-host URL reaches the standby for writes once it is promoted
// (and not before: it is read-only until then).
func TestPairFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers")
	}
	p := replicatest.New(t)
	url := p.CreateDatabase("rt")
	ctx := context.Background()

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var port int
	require.NoError(t, conn.QueryRow(ctx, `SELECT inet_server_port()`).Scan(&port))
	require.Equal(t, p.Primary.Port, port, "the multi-host URL goes to the primary")
	_, err = conn.Exec(ctx, `CREATE TABLE t (v int); INSERT INTO t VALUES (42)`)
	require.NoError(t, err)
	conn.Close(ctx)
	p.WaitReplayed()

	// The standby serves reads and refuses writes with 25006, which the
	// services take for the store being unavailable (503, retry).
	standby, err := pgx.Connect(ctx, p.Standby.URL("rt"))
	require.NoError(t, err)
	var v int
	require.NoError(t, standby.QueryRow(ctx, `SELECT v FROM t`).Scan(&v))
	require.Equal(t, 42, v)
	_, err = standby.Exec(ctx, `INSERT INTO t VALUES (1)`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code)
	require.True(t, postgres.Unavailable(err))
	standby.Close(ctx)

	p.KillPrimary()
	_, err = pgx.Connect(ctx, url)
	require.Error(t, err, "no server accepts writes while the standby is not promoted")

	p.Promote()
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.QueryRow(ctx, `SELECT inet_server_port()`).Scan(&port))
	require.Equal(t, p.Standby.Port, port)
	require.NoError(t, conn.QueryRow(ctx, `SELECT v FROM t`).Scan(&v))
	require.Equal(t, 42, v)
	_, err = conn.Exec(ctx, `INSERT INTO t VALUES (43)`)
	require.NoError(t, err)
}
