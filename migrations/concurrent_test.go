package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/migrations"
)

const retentionIndex = "label_intents_failed_completed_at"

// indexValid tells whether the index exists and whether it is valid.
func indexValid(t *testing.T, pool *pgxpool.Pool, name string) (exists, valid bool) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `
		SELECT count(*) = 1, coalesce(bool_and(indisvalid), false) FROM pg_index WHERE indexrelid = to_regclass($1)`,
		name).Scan(&exists, &valid)
	require.NoError(t, err)
	return exists, valid
}

// Only 015 runs outside a transaction, and a fresh database gets its index,
// valid.
func TestNoTransactionFresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	all, err := migrations.All()
	require.NoError(t, err)
	var outside []string
	for _, m := range all {
		if m.NoTransaction {
			outside = append(outside, m.Name)
		}
	}
	require.Equal(t, []string{"015_retention.sql"}, outside)

	pool := emptyDatabase(t, "labels_migtest015_fresh")
	res, err := migrations.Apply(ctx, pool)
	require.NoError(t, err)
	require.Contains(t, res.Applied, "015_retention.sql")
	exists, valid := indexValid(t, pool, retentionIndex)
	require.True(t, exists)
	require.True(t, valid)
}

// A build that failed left an invalid index and no version: Apply drops the
// leftover and builds the index anew, valid.
func TestNoTransactionReplacesInvalidIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDatabase(t, "labels_migtest015_invalid")
	_, err := migrations.Apply(ctx, pool)
	require.NoError(t, err)
	var before uint32
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1)::oid`, retentionIndex).Scan(&before))
	_, err = pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass($1)`, retentionIndex)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = 15`)
	require.NoError(t, err)
	exists, valid := indexValid(t, pool, retentionIndex)
	require.True(t, exists)
	require.False(t, valid, "the leftover is invalid")

	res, err := migrations.Apply(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, []string{"015_retention.sql"}, res.Applied)
	exists, valid = indexValid(t, pool, retentionIndex)
	require.True(t, exists)
	require.True(t, valid)
	var after uint32
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1)::oid`, retentionIndex).Scan(&after))
	require.NotEqual(t, before, after, "built anew")
}

const insertIntent = `
	INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no,
	                           label_version, payload, carrier_key, created_at)
	VALUES ($1, 'c1', $1, sha256(convert_to($1, 'UTF8')), 1, $2, 1, 1, '{}', $1, now())`

// While 015 builds its index, another session's insert into label_intents
// commits. The gate is an open transaction that has written to the table:
// the CONCURRENTLY build waits for it before building, holding its lock on
// the table all along (a plain CREATE INDEX would wait there for its SHARE
// lock, and the insert would queue behind it).
func TestNoTransactionBuildLetsWritesThrough(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := emptyDatabase(t, "labels_migtest015_writes")
	_, err := migrations.Apply(ctx, pool)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DROP INDEX `+retentionIndex+`; DELETE FROM schema_migrations WHERE version = 15`)
	require.NoError(t, err)

	gate, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer gate.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // committed below
	_, err = gate.Exec(ctx, insertIntent, "lr_gate", 1)
	require.NoError(t, err)

	type result struct {
		res migrations.Result
		err error
	}
	applied := make(chan result, 1)
	go func() {
		r, err := migrations.Apply(ctx, pool)
		applied <- result{r, err}
	}()

	// The build waits on a lock: for the gate.
	for waiting := false; !waiting; {
		select {
		case r := <-applied:
			t.Fatalf("Apply returned while the gate was open: %+v %v", r.res, r.err)
		default:
		}
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
			               AND query LIKE '%CREATE INDEX%' || $1 || '%' AND wait_event_type = 'Lock')`,
			retentionIndex).Scan(&waiting))
	}

	// A third session inserts, and commits, or waits on a lock (the test fails).
	writer, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer writer.Release()
	var writerPID uint32
	require.NoError(t, writer.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&writerPID))
	inserted := make(chan error, 1)
	go func() {
		_, err := writer.Exec(ctx, insertIntent, "lr_during", 2)
		inserted <- err
	}()
	for done := false; !done; {
		select {
		case err := <-inserted:
			require.NoError(t, err)
			done = true
		default:
			var blocked string
			require.NoError(t, pool.QueryRow(ctx, `
				SELECT coalesce(max(wait_event), '') FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`,
				writerPID).Scan(&blocked))
			if blocked != "" {
				cancel()
				t.Fatalf("the insert waits on a lock (%s) while the index builds", blocked)
			}
		}
	}
	select {
	case r := <-applied:
		t.Fatalf("Apply returned while the gate was open: %+v %v", r.res, r.err)
	default:
	}
	var recorded bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 15)`).Scan(&recorded))
	require.False(t, recorded, "recorded only once built")

	require.NoError(t, gate.Commit(ctx))
	r := <-applied
	require.NoError(t, r.err)
	require.Equal(t, []string{"015_retention.sql"}, r.res.Applied)
	exists, valid := indexValid(t, pool, retentionIndex)
	require.True(t, exists)
	require.True(t, valid)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM label_intents WHERE request_id IN ('lr_gate', 'lr_during')`).Scan(&n))
	require.Equal(t, 2, n)
}
