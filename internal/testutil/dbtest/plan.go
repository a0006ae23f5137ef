package dbtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// RequireProbes prepares sql as a statement with the given parameter types,
// runs settings (a statement that sets what the code sets in its transaction,
// with settingsArgs) and explains the statement's generic plan for args, in
// a transaction that rolls back. It fails t unless every scan of a table in
// tables is a probe: an index scan with an index condition, or a bitmap
// scan, never a sequential scan or a whole-index walk. Run on empty tables,
// this is the plan a connection keeps after first running the statement on a
// fresh database.
func RequireProbes(t testing.TB, conn *pgx.Conn, settings string, settingsArgs []any, sql string, types []string, args []string, tables ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	// A prepared statement outlives its transaction.
	defer conn.Exec(ctx, "DEALLOCATE probe_check") //nolint:errcheck // absent when PREPARE failed
	defer tx.Rollback(ctx)                         //nolint:errcheck // only explains
	_, err = tx.Exec(ctx, settings, settingsArgs...)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "PREPARE probe_check("+strings.Join(types, ", ")+") AS "+sql)
	require.NoError(t, err)
	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE probe_check("+strings.Join(args, ", ")+")").Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &plan))
	require.Len(t, plan, 1)
	want := make(map[string]bool, len(tables))
	for _, tb := range tables {
		want[tb] = true
	}
	seen := map[string]bool{}
	var walk func(n planNode)
	walk = func(n planNode) {
		if want[n.Relation] && strings.HasSuffix(n.NodeType, "Scan") {
			seen[n.Relation] = true
			switch n.NodeType {
			case "Index Scan", "Index Only Scan":
				require.NotEmpty(t, n.IndexCond, "%s of %s without an index condition: a walk of the whole index\n%s", n.NodeType, n.Relation, raw)
			case "Bitmap Heap Scan":
			default:
				require.Fail(t, fmt.Sprintf("%s of %s", n.NodeType, n.Relation), "%s", raw)
			}
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan[0].Plan)
	for _, tb := range tables {
		require.True(t, seen[tb], "the plan reads no %s:\n%s", tb, raw)
	}
}

type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
}
