package migrations_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/migrations"
)

// emptyDatabase returns a pool on database name, created if missing, with
// an empty public schema.
func emptyDatabase(t *testing.T, name string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	dbURL, err := devdb.EnsureDatabase(ctx, dbtest.AdminURL(t), name)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
	require.NoError(t, err)
	return pool
}

// migratedUpTo returns an empty database named dbName with the first applied
// migrations run, and the migration named name, which a test runs next.
func migratedUpTo(t *testing.T, dbName, name string, applied int) (*pgxpool.Pool, migrations.Migration) {
	t.Helper()
	pool := emptyDatabase(t, dbName)
	all, err := migrations.All()
	require.NoError(t, err)
	at := slices.IndexFunc(all, func(m migrations.Migration) bool { return m.Name == name })
	require.GreaterOrEqual(t, at, applied, "%s comes after the %d applied", name, applied)
	for _, m := range all[:applied] {
		_, err := pool.Exec(context.Background(), m.SQL)
		require.NoError(t, err, m.Name)
	}
	return pool, all[at]
}

// Two runners at once on an empty database, then a third: all succeed, and the
// migrations are applied exactly once.
func TestApplyConcurrentAndTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDatabase(t, "labels_migtest")

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

// 004 moves the attempt count of a started key's intent onto the key; a
// completed key keeps none, and the intents lose the column.
func TestLeaseAttemptsMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m004 := migratedUpTo(t, "labels_migtest004", "004_lease_attempts.sql", 3)
	_, err := pool.Exec(ctx, `
		INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state,
		                              response_status, response_body, created_at, expires_at)
		VALUES ('c1', 'started', sha256('a'), 1, 'lr_started', 'started', NULL, NULL, now(), now()),
		       ('c1', 'done', sha256('b'), 1, 'lr_done', 'completed', 201, '{}', now(), now());
		INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no,
		                           label_version, payload, carrier_key, status, label_id, attempts, created_at, completed_at)
		VALUES ('lr_started', 'c1', 'started', sha256('a'), 1, 1, 1, 1, '{}', 'ck1', 'pending', NULL, 3, now(), NULL),
		       ('lr_done', 'c1', 'done', sha256('b'), 1, 2, 1, 1, '{}', 'ck2', 'succeeded', 'lbl_1', 2, now(), now())`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, m004.SQL)
	require.NoError(t, err)
	attempts := func(key string) (n *int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT attempts FROM idempotency_keys WHERE idem_key = $1`, key).Scan(&n))
		return n
	}
	require.Equal(t, 3, *attempts("started"))
	require.Nil(t, attempts("done"), "a completed key keeps no count")
	var cols int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'label_intents' AND column_name = 'attempts'`).Scan(&cols))
	require.Zero(t, cols)
}

// River's schema is River's: after every migration, each index River's
// reindexer rebuilds exists (River would warn of a missing one at each run),
// the GIN indexes on river_job included; and 006 puts them back on a database
// where they had been dropped.
func TestRiverIndexesKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDatabase(t, "labels_migtest_river")
	_, err := migrations.Apply(ctx, pool)
	require.NoError(t, err)

	exists := func(name string) bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
		return ok
	}
	requireAll := func() {
		for _, name := range river.ReindexerIndexNamesDefault() {
			require.True(t, exists(name), "%s, which River reindexes, exists", name)
		}
	}
	requireAll()
	gin := []string{"river_job_args_index", "river_job_metadata_index"}
	for _, name := range gin {
		require.True(t, exists(name))
		_, err := pool.Exec(ctx, "DROP INDEX "+name)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = 6`)
	require.NoError(t, err)
	_, err = migrations.Apply(ctx, pool)
	require.NoError(t, err)
	requireAll()
}

// 011 moves the intents not yet dispatched into the relay's queue, with their
// acceptance times, and label_intents loses dispatched_at and its index.
func TestIntentOutboxMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// label_intents as 011 finds it after 001-004; the others need River's tables.
	pool, m011 := migratedUpTo(t, "labels_migtest011", "011_intent_outbox.sql", 4)
	_, err := pool.Exec(ctx, `
		INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no,
		                           label_version, payload, carrier_key, created_at, dispatched_at)
		VALUES ('lr_waiting', 'c1', 'a', sha256('a'), 1, 1, 1, 1, '{}', 'ck1', '2026-12-01T10:00:00Z', NULL),
		       ('lr_sent', 'c1', 'b', sha256('b'), 1, 2, 1, 1, '{}', 'ck2', '2026-12-01T09:00:00Z', '2026-12-01T09:00:01Z')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, m011.SQL)
	require.NoError(t, err)
	var id string
	var created time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT request_id, created_at FROM label_intent_outbox`).Scan(&id, &created))
	require.Equal(t, "lr_waiting", id)
	require.True(t, created.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)))
	var gone int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM information_schema.columns WHERE table_name = 'label_intents' AND column_name = 'dispatched_at')
		     + (SELECT count(*) FROM pg_indexes WHERE indexname = 'label_intents_undispatched')`).Scan(&gone))
	require.Zero(t, gone)
}

// 012 gives the rows already in the relay's queue their callers, and the
// queue its caller index.
func TestOutboxCallerMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// label_intents and the queue as 012 finds them: 001-004, then 011.
	pool, m012 := migratedUpTo(t, "labels_migtest012", "012_outbox_caller.sql", 4)
	all, err := migrations.All()
	require.NoError(t, err)
	at := slices.IndexFunc(all, func(m migrations.Migration) bool { return m.Name == "011_intent_outbox.sql" })
	require.GreaterOrEqual(t, at, 0)
	_, err = pool.Exec(ctx, all[at].SQL)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no,
		                           label_version, payload, carrier_key, created_at)
		VALUES ('lr_a', 'c1', 'a', sha256('a'), 1, 1, 1, 1, '{}', 'ck1', '2026-12-01T10:00:00Z'),
		       ('lr_b', 'c2', 'b', sha256('b'), 1, 2, 1, 1, '{}', 'ck2', '2026-12-01T09:00:00Z');
		INSERT INTO label_intent_outbox (created_at, request_id) SELECT created_at, request_id FROM label_intents`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, m012.SQL)
	require.NoError(t, err)
	var callers string
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(request_id || '=' || caller_id, ',' ORDER BY request_id) FROM label_intent_outbox`).Scan(&callers))
	require.Equal(t, "lr_a=c1,lr_b=c2", callers)
	var indexed bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('label_intent_outbox_caller') IS NOT NULL`).Scan(&indexed))
	require.True(t, indexed)
}
