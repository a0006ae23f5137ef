package capacity

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
)

// TestMeasureSmall runs every measurement with a tiny fill against a real
// server and checks that the report adds up. Timings are not checked: they
// are what the program measures, not what a test may assert.
func TestMeasureSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("fills and purges a scratch database")
	}
	t.Parallel()
	admin := dbtest.AdminURL(t)
	cfg := DefaultConfig()
	cfg.ServerURL = admin
	cfg.Records, cfg.Live, cfg.Pipeline = 2000, 200, 60
	cfg.SweepBatches = []int{1000, 300}
	cfg.Clients, cfg.Rate = 4, 200
	cfg.LoadSeconds, cfg.SatSeconds, cfg.MaxLoad = 300*time.Millisecond, 300*time.Millisecond, time.Minute
	cfg.LogFunc = t.Logf
	require.NoError(t, cfg.Validate())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Measure(ctx, cfg)
	require.NoError(t, err)

	// The scratch database is gone.
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.True(t, strings.HasPrefix(rep.Database, "labels_capacity_"), rep.Database)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, rep.Database).Scan(&exists))
	require.False(t, exists, "scratch database %s was not dropped", rep.Database)

	// 1. Sizes: every table has the filled rows and a positive footprint.
	sizes := map[string]Size{}
	for _, s := range rep.Sizes {
		sizes[s.Table] = s
	}
	filled := int64(cfg.Records + cfg.Live)
	for _, table := range []string{"idempotency_keys", "label_intents", "labels", "river_job"} {
		s, ok := sizes[table]
		require.True(t, ok, "no size for %s", table)
		require.GreaterOrEqual(t, s.Rows, filled, table)
		require.Positive(t, s.BytesPerRow, table)
		require.Positive(t, s.HeapPerRow, table)
		require.Positive(t, s.IndexPerRow, table)
		require.InDelta(t, s.BytesPerRow, s.HeapPerRow+s.IndexPerRow+s.ToastPerRow, 0.01, table)
		// A record holds at least its data.
		require.Greater(t, s.BytesPerRow, s.TupleBytesAvg, table)
	}
	// The saved response is a rendered label, about 300 bytes: the key record's data is larger.
	require.Greater(t, sizes["idempotency_keys"].TupleBytesAvg, 300.0)
	require.Positive(t, rep.Churned.BytesPerRow)
	// A day of older tombstones, and one per purged key.
	require.Equal(t, int64(2*cfg.Records), rep.Tombstones.Rows)
	require.Positive(t, rep.Tombstones.BytesPerRow)

	// 2. Purges: every run deleted exactly the expired keys and left none;
	// the last one is one sweeper run, over the keys expired by then.
	require.Len(t, rep.Purges, len(cfg.SweepBatches)+2, "one per batch size, two under load")
	for i, p := range rep.Purges {
		want := int64(cfg.Records)
		if i == len(rep.Purges)-1 {
			want = int64(cfg.Records / 2)
		}
		require.Equal(t, want, p.Deleted, p.Name)
		require.Zero(t, p.RemainingExpired, p.Name)
		require.Positive(t, p.KeysPerSec, p.Name)
		require.Positive(t, p.WALBytes, p.Name)
	}
	require.True(t, rep.Purges[len(rep.Purges)-1].UnderLoad)
	require.True(t, rep.Purges[len(rep.Purges)-2].UnderLoad)
	require.Equal(t, int64(cfg.Records), rep.TombstonePurge.Deleted, "the older day of tombstones")
	require.Equal(t, filled+int64(rep.Pipeline.RiverJobs), rep.RiverCleaner.Deleted, "the cleaner deleted every completed job")

	// 3. Loads: new accepts answered 202, replays of completed keys 201, nothing else.
	require.Len(t, rep.Loads, 6)
	for _, l := range rep.Loads {
		require.Positive(t, l.Requests, l.Name)
		require.Zero(t, l.Errors, "%s: %v", l.Name, l.Statuses)
		for k := range l.Statuses {
			require.Contains(t, []string{"new 202", "replay 201", "commit ok"}, k, l.Name)
		}
		require.Positive(t, l.P99Ms, l.Name)
		require.GreaterOrEqual(t, l.P99Ms, l.P50Ms, l.Name)
	}
	require.Positive(t, rep.Loads[0].Statuses["replay 201"], "the steady load replays")

	// 4. Pipeline: every request became a label through the real worker.
	p := rep.Pipeline
	require.Equal(t, cfg.Pipeline, p.Succeeded)
	require.Positive(t, p.WALPerAccept)
	require.Positive(t, p.WALPerLabel)
	if p.AcceptWAL.Filtered {
		// At most one durable commit per accept (key record and intent
		// together), fewer when accepts share a transaction (ACCEPT_BATCH).
		require.Positive(t, p.CommitsPerAccept)
		require.LessOrEqual(t, p.CommitsPerAccept, 1.05)
		// The lease and the completion commit apart, but each commit is shared
		// by the jobs of one statement (WORKER_BATCH): from a fraction of a
		// commit per label under load to about three for a job alone.
		require.Positive(t, p.CommitsPerLabel)
		require.Less(t, p.CommitsPerLabel, 4.0)
	}

	// 5. Partitions: the same keys went, and the evaluation saw what it reports.
	pt := rep.Partitions
	require.Equal(t, int64(cfg.Records), pt.Drop.Deleted, "the dropped partition held exactly the expired keys")
	require.Equal(t, rep.Purges[0].Deleted, pt.Drop.Deleted, "partition drop and jobs.Sweep purge the same count")
	require.Equal(t, int64(cfg.Records), pt.PlainSweep.Deleted)
	require.Equal(t, filled, pt.Size.Rows)
	require.Positive(t, pt.Size.BytesPerRow)
	require.Contains(t, pt.PKError, "partitioning columns")
	require.Equal(t, 1, pt.DuplicateRowsPlain)
	require.Equal(t, 2, pt.DuplicateRowsPartitioned)
	require.True(t, pt.RowMoved)
	require.Contains(t, pt.ConcurrentLockPartition, "40001")
	require.Contains(t, pt.ConcurrentLockPlain, "completed")
	require.False(t, pt.Adopted, "partitions lose the uniqueness of (caller_id, idem_key)")
	require.Len(t, pt.Loads, 4)
	for _, l := range pt.Loads {
		require.Zero(t, l.Errors, "%s: %v", l.Name, l.Statuses)
	}

	// 6. Scale-out arithmetic uses the seed's 10x peak and the measured costs.
	s := rep.ScaleOut
	require.Equal(t, 20_000.0, s.PeakCreatesPerSec)
	require.InDelta(t, 1.728e9, s.KeysPerDay, 1)
	require.InDelta(t, 1.728e9*512, s.SeedKeyStoreBytes, 1)
	require.Positive(t, s.WALBytesPerSec)
	require.Positive(t, s.CommitsPerSec)

	// The report prints and round-trips as JSON.
	var out bytes.Buffer
	PrintReport(&out, rep)
	require.Contains(t, out.String(), "Bytes per row")
	require.Contains(t, out.String(), "adopted: false")
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, rep.Purges[0].Deleted, back.Purges[0].Deleted)
}
