package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/migrations"
)

// Check: an empty database and one a step behind (ours or River's) are
// behind, naming `api migrate`; a migrated one, or one ahead of the binary
// (a rolling upgrade after `api migrate`), is not.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty, _ := dbtest.NewEmpty(t)
	err := migrations.Check(ctx, empty)
	var behind *migrations.BehindError
	require.ErrorAs(t, err, &behind)
	all, err2 := migrations.All()
	require.NoError(t, err2)
	require.Len(t, behind.Missing, len(all))
	require.NotEmpty(t, behind.RiverMissing)
	require.Contains(t, err.Error(), "run `api migrate`")

	pool, _ := dbtest.New(t)
	require.NoError(t, migrations.Check(ctx, pool))
	_, err = pool.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')`)
	require.NoError(t, err)
	require.NoError(t, migrations.Check(ctx, pool), "a schema ahead of the binary is fine")

	last := all[len(all)-1]
	_, err = pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, last.Version)
	require.NoError(t, err)
	err = migrations.Check(ctx, pool)
	require.ErrorAs(t, err, &behind)
	require.Equal(t, []string{last.Name}, behind.Missing)
	require.Empty(t, behind.RiverMissing)
	require.Contains(t, err.Error(), "1 of ours (from "+last.Name+")")

	_, err = pool.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, last.Version, last.Name)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM river_migration WHERE version = (SELECT max(version) FROM river_migration)`)
	require.NoError(t, err)
	err = migrations.Check(ctx, pool)
	require.ErrorAs(t, err, &behind)
	require.Empty(t, behind.Missing)
	require.Len(t, behind.RiverMissing, 1)
	require.Contains(t, err.Error(), "1 of River's")
}

// Gate: behind until migrated, read again while behind only every
// RecheckBehind, and not at all while current (a ping per probe only).
func TestGate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := dbtest.NewEmpty(t)
	g := migrations.NewGate(pool)
	now := time.Unix(1_000_000, 0)
	migrations.SetNow(g, func() time.Time { return now })
	require.True(t, migrations.IsBehind(g.Ready(ctx)))

	_, err := migrations.Apply(ctx, pool)
	require.NoError(t, err)
	require.True(t, migrations.IsBehind(g.Ready(ctx)), "cached until RecheckBehind")
	now = now.Add(migrations.RecheckBehind)
	require.NoError(t, g.Ready(ctx), "read again after RecheckBehind")

	// Current: the version is not read again; a drop of a migration
	// record goes unseen until a failed ping (the database came back).
	_, err = pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)`)
	require.NoError(t, err)
	now = now.Add(time.Hour)
	require.NoError(t, g.Ready(ctx), "no query beyond the ping while current")
	g.Seed(nil)
	require.NoError(t, g.Ready(ctx))
	require.True(t, migrations.IsBehind(g.Check(ctx)), "Check reads it now")
	require.True(t, migrations.IsBehind(g.Ready(ctx)))
}
