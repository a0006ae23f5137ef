package postgres_test

import (
	"context"
	"testing"

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
	var v string
	require.NoError(t, pool.QueryRow(context.Background(), `SHOW idle_in_transaction_session_timeout`).Scan(&v))
	require.Equal(t, "15s", v)
}
