package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/labelkit/labels/internal/dbtest"
	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/migrations"
)

// Two runners at once on an empty database, then a third: all succeed, and the
// migrations are applied exactly once.
func TestApplyConcurrentAndTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := dbtest.AdminURL(t)
	dbURL, err := devdb.EnsureDatabase(ctx, admin, "labels_migtest")
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
	require.NoError(t, err)

	var g errgroup.Group
	results := make([]migrations.Result, 2)
	for i := range results {
		g.Go(func() error {
			r, err := migrations.Apply(ctx, pool)
			results[i] = r
			return err
		})
	}
	require.NoError(t, g.Wait())
	all, err := migrations.All()
	require.NoError(t, err)
	require.Equal(t, len(all), len(results[0].Applied)+len(results[1].Applied), "each migration applied once")

	again, err := migrations.Apply(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
	require.Zero(t, again.RiverApplied)

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n))
	require.Equal(t, len(all), n)
}
