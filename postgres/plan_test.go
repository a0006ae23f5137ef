package postgres_test

import (
	"testing"

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
	conn := fixture.EmptiedFullStore(t)
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
