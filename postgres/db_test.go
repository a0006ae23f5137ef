package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/postgres"
)

// A service session ends a transaction left idle, so that a frozen process
// cannot hold its row locks for long.
func TestServiceSessionSettings(t *testing.T) {
	t.Parallel()
	_, url := dbtest.New(t)
	cfg, err := postgres.PoolConfig(url)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	v := dbtest.Scalar[string](t, pool, `SHOW idle_in_transaction_session_timeout`)
	require.Equal(t, "15s", v)
}

// Through a pooler the pool prepares nothing by name and sends no startup
// setting (a URL's own default_query_exec_mode wins); LISTEN goes to the
// direct URL, or nowhere without one; the session work (migrations) to the
// direct URL when there is one.
func TestParseEndpoints(t *testing.T) {
	t.Parallel()
	const pooler, direct = "postgres://u@pgbouncer:6432/labels", "postgres://u@pg:5432/labels"
	e, err := postgres.ParseEndpoints(pooler, direct, true)
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, e.Pool.ConnConfig.DefaultQueryExecMode)
	require.NotContains(t, e.Pool.ConnConfig.RuntimeParams, "idle_in_transaction_session_timeout")
	require.Equal(t, "pg", e.Listen().Host)
	require.Equal(t, "pg", e.Session().ConnConfig.Host)
	require.Equal(t, "15s", e.Direct.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"], "the direct sessions keep the services' settings")

	e, err = postgres.ParseEndpoints(pooler+"?default_query_exec_mode=exec", "", true)
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeExec, e.Pool.ConnConfig.DefaultQueryExecMode)
	require.Nil(t, e.Listen(), "pooled without a direct URL: nothing listens")
	require.Equal(t, "pgbouncer", e.Session().ConnConfig.Host)

	e, err = postgres.ParseEndpoints(direct, "", false)
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeCacheStatement, e.Pool.ConnConfig.DefaultQueryExecMode)
	require.Equal(t, "15s", e.Pool.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"])
	require.Equal(t, "pg", e.Listen().Host)

	_, err = postgres.ParseEndpoints(pooler, "::bad", true)
	require.ErrorContains(t, err, "DATABASE_DIRECT_URL")
}

// A multi-host URL (a primary and its standbys) keeps every host, and
// target_session_attrs, in the pool, the listener's connection and the
// session pool, for DATABASE_URL and DATABASE_DIRECT_URL alike.
func TestParseEndpointsMultiHost(t *testing.T) {
	t.Parallel()
	const multi = "postgres://u@pg1:5432,pg2:5433/labels?sslmode=disable&target_session_attrs=read-write"
	hosts := func(c *pgx.ConnConfig) []string {
		out := []string{fmt.Sprintf("%s:%d", c.Host, c.Port)}
		for _, f := range c.Fallbacks {
			out = append(out, fmt.Sprintf("%s:%d", f.Host, f.Port))
		}
		require.NotNil(t, c.ValidateConnect, "target_session_attrs=read-write checks each session")
		return out
	}
	want := []string{"pg1:5432", "pg2:5433"}
	e, err := postgres.ParseEndpoints(multi, "", false)
	require.NoError(t, err)
	require.Equal(t, want, hosts(e.Pool.ConnConfig))
	require.Equal(t, want, hosts(e.Listen()))
	require.Equal(t, want, hosts(e.Session().ConnConfig))
	require.Equal(t, "15s", e.Pool.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"])

	e, err = postgres.ParseEndpoints("postgres://u@pgbouncer:6432/labels", multi, true)
	require.NoError(t, err)
	require.Equal(t, want, hosts(e.Listen()))
	require.Equal(t, want, hosts(e.Session().ConnConfig))
}
