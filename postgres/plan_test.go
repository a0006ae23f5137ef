package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// The statements over arrays, with their generic plans made on tables that
// were emptied after being full (the statistics say almost every key
// completed and every intent final, the tables hold nothing), probe the
// tables through their indexes from the batch's rows: a plan that read a
// table whole would be kept for the life of the connection while the table
// grows.
func TestPlansProbe(t *testing.T) {
	pool, _ := dbtest.New(t)
	conn := fixture.EmptiedFullStore(t, pool)
	lock := []any{"1000ms"}
	a, ts, uid := "'{a}'", "'{2026-12-02T00:00:00Z}'", "'{00000000-0000-0000-0000-000000000000}'"
	t.Run("accept", func(t *testing.T) {
		dbtest.RequireProbes(t, conn, postgres.PlanSettings, lock, postgres.SQLAccept,
			[]string{"text[]", "text[]", "bytea[]", "int2[]", "text[]", "float8[]", "bigint[]", "int[]", "int[]", "jsonb[]", "text[]"},
			[]string{a, a, `'{"\\x00"}'`, "'{1}'", a, "'{86400}'", "'{1}'", "'{1}'", "'{1}'", `'{"{}"}'`, a},
			"idempotency_tombstones", "idempotency_keys", "label_intents")
	})
	t.Run("parcel taken", func(t *testing.T) {
		dbtest.RequireProbes(t, conn, postgres.PlanSettings, lock, postgres.SQLUnclaimParcelTaken,
			[]string{"text[]", "text[]", "text[]"}, []string{"'{a}'", "'{b}'", "'{c}'"},
			"idempotency_keys", "label_intents")
	})
	t.Run("lease", func(t *testing.T) {
		dbtest.RequireProbes(t, conn, postgres.PlanSettings, lock, postgres.SQLLease,
			[]string{"text[]", "uuid[]", "float8"}, []string{"'{lr_1}'", uid, "30"},
			"idempotency_keys", "label_intents")
	})
	t.Run("completion", func(t *testing.T) {
		num := "'{1}'"
		dbtest.RequireProbes(t, conn, postgres.PlanSettings, lock, postgres.SQLComplete,
			[]string{"text[]", "text[]", "text[]", "uuid[]", "int[]", "text[]", "text[]", "text[]", "text[]", "text[]", "text[]", "text[]",
				"bigint[]", "bigint[]", "int[]", "int[]", "timestamptz[]", "float8", "text[]", "text[]", "bigint[]"},
			[]string{a, a, a, uid, num, `'{"{}"}'`, a, a, a, a, a, a, num, num, num, num, ts, "86400", a, a, num},
			"idempotency_keys", "label_intents")
	})
}

// The relay's statement is planned on each run (it is sent unprepared), so
// its plan follows the table: with a backlog in a queue whose statistics were
// taken while it was empty, it finds the callers and each one's oldest rows
// through the caller index, and reads no table whole.
func TestDispatchPlanFollowsTheTable(t *testing.T) {
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	conn := fixture.EmptiedFullStore(t, pool)
	_, err := conn.Exec(ctx, `ANALYZE label_intent_outbox`) // statistics of an empty table
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `
		INSERT INTO label_intent_outbox (created_at, request_id, caller_id)
		SELECT now() - g * interval '1 ms', 'lr_' || g, 'c' || g % 3 FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // only explains
	sql := strings.NewReplacer("$1", "500", "$2", "1000", "$3", "'labels'", "$4", "'c1'").Replace(postgres.SQLDispatch)
	plan := dbtest.Scalar[string](t, tx, `EXPLAIN (FORMAT JSON) `+sql)
	require.Contains(t, plan, `"Index Name": "label_intent_outbox_caller"`)
	require.NotContains(t, plan, `Seq Scan`)
}
