package failover_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/failover"
)

// TestStartWithDatabase starts a formation in a root whose parent is
// missing, with a database on it, and checks the URL and the summary.
func TestStartWithDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pg_auto_failover monitor and two PostgreSQL nodes")
	}
	if err := failover.Available(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := filepath.Join(t.TempDir(), "kept", "ha")
	f, u, err := failover.StartWithDatabase(ctx, failover.Options{Root: root, Log: t.Logf}, "labels_kept")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Stop(context.Background())) })
	require.Equal(t, f.URL("labels_kept"), u)

	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var db string
	var standby bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_database(), pg_is_in_recovery()`).Scan(&db, &standby))
	require.Equal(t, "labels_kept", db)
	require.False(t, standby, "the multi-host URL reaches the primary")

	p, err := f.Primary(ctx)
	require.NoError(t, err)
	var b strings.Builder
	f.Summary(ctx, &b, "labels_kept")
	require.Contains(t, b.String(), u+"   (pg_auto_failover: primary "+p.Name+", synchronous standby; in "+f.Root()+")")
	require.Contains(t, b.String(), "--monitor '"+f.MonitorURL()+"'")
	require.Contains(t, b.String(), "switchover --pgdata "+f.Monitor().Dir)
}
