package outbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/outbox"
)

// The relay's statement is planned on each run (it is sent unprepared), so
// its plan follows the table: with a backlog in a queue whose statistics were
// taken while it was empty, it finds the callers and each one's oldest rows
// through the caller index, and reads no table whole.
func TestDispatchPlanFollowsTheTable(t *testing.T) {
	ctx := context.Background()
	conn := fixture.EmptiedFullStore(t)
	_, err := conn.Exec(ctx, `ANALYZE label_intent_outbox`) // statistics of an empty table
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `
		INSERT INTO label_intent_outbox (created_at, request_id, caller_id)
		SELECT now() - g * interval '1 ms', 'lr_' || g, 'c' || g % 3 FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // only explains
	sql := strings.NewReplacer("$1", "500", "$2", "1000", "$3", "'labels'", "$4", "'c1'").Replace(outbox.SQLDispatch)
	plan := dbtest.Scalar[string](t, tx, `EXPLAIN (FORMAT JSON) `+sql)
	require.Contains(t, plan, `"Index Name": "label_intent_outbox_caller"`)
	require.NotContains(t, plan, `Seq Scan`)
}
