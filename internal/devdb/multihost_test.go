package devdb_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/testutil/dbtest"
)

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:p@h1:5432,h2:5433/labels?sslmode=disable&target_session_attrs=read-write": "postgres://u:p@h1:5432,h2:5433/postgres?sslmode=disable&target_session_attrs=read-write",
		"postgres://h1,h2":                   "postgres://h1,h2/postgres",
		"postgres://u@h:5432/x/":             "postgres://u@h:5432/postgres",
		"postgresql://h:1?connect_timeout=5": "postgresql://h:1/postgres?connect_timeout=5",
	} {
		require.Equal(t, want, devdb.WithDatabase(in, "postgres"), in)
	}
}

// A multi-host URL whose first host is down: Ensure keeps the list (pgx
// goes on to the next host), and EnsureDatabase names the database on it.
func TestEnsureMultiHost(t *testing.T) {
	t.Parallel()
	admin := dbtest.AdminURL(t)
	cfg, err := pgx.ParseConfig(admin)
	require.NoError(t, err)
	addr := cfg.Host + ":" + strconv.Itoa(int(cfg.Port))
	multi := "postgres://" + cfg.User + "@127.0.0.1:1," + addr + "/whatever?sslmode=disable"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := devdb.Ensure(ctx, devdb.Options{URL: multi, Port: 1, Dir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, devdb.WithDatabase(multi, "postgres"), got)
	url, err := devdb.EnsureDatabase(ctx, got, "postgres")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Equal(t, "postgres", dbtest.Scalar[string](t, conn, `SELECT current_database()`))
}

// EnsureURL creates the database its URL names (the default name when it
// names none) and refuses a URL that is not postgres://.
func TestEnsureURL(t *testing.T) {
	t.Parallel()
	admin := dbtest.AdminURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, named := range []bool{true, false} {
		name, u := devdb.ScratchName("labels_ensureurl_"), devdb.WithDatabase(admin, "")
		if named {
			u = devdb.WithDatabase(admin, name)
		}
		got, err := devdb.EnsureURL(ctx, devdb.Options{URL: u, Port: 1, Dir: t.TempDir()}, name)
		require.NoError(t, err)
		require.Equal(t, devdb.WithDatabase(admin, name), devdb.WithDatabase(got, name))
		conn, err := pgx.Connect(ctx, got)
		require.NoError(t, err)
		var db string
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
		require.Equal(t, name, db)
		require.NoError(t, conn.Close(ctx))
		require.NoError(t, devdb.DropScratch(ctx, admin, name, "labels_ensureurl_"))
	}
	_, err := devdb.EnsureURL(ctx, devdb.Options{URL: "mysql://h/db"}, "labels")
	require.ErrorContains(t, err, "must be a postgres:// URL")
}

// StopIfRunning leaves a directory where no server runs alone.
func TestStopIfRunningWithoutServer(t *testing.T) {
	t.Parallel()
	stopped, err := devdb.StopIfRunning(context.Background(), t.TempDir())
	require.NoError(t, err)
	require.False(t, stopped)
}
