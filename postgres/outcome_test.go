package postgres_test

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/postgres"
)

// Every outcome a statement selects is one of its Go constants, spliced into
// the statement's text, and each constant read back from PostgreSQL is
// itself: the numbers cannot drift from the iota order.
func TestOutcomesRoundTrip(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	roundTrip(t, pool, "sqlAccept", postgres.SQLAccept,
		postgres.AcceptStored, postgres.AcceptKeyExists, postgres.AcceptParcelTaken, postgres.AcceptBusy)
	roundTrip(t, pool, "sqlLease", postgres.SQLLease,
		postgres.Leased, postgres.LeaseGone, postgres.LeaseFinal, postgres.LeaseHeld, postgres.LeaseBusy)
	roundTrip(t, pool, "sqlComplete", postgres.SQLComplete,
		postgres.Completed, postgres.CompleteFenced, postgres.CompleteParcelLabelled, postgres.CompleteBusy)
}

// roundTrip checks that the numbers after THEN and ELSE in stmt (its outcome
// CASE: no other branch of these statements is a number) are those of
// outcomes, and that each outcome scans back from its literal.
func roundTrip[T postgres.AcceptResult | postgres.LeaseResult | postgres.CompleteResult](t *testing.T, pool *pgxpool.Pool, name, stmt string, outcomes ...T) {
	t.Helper()
	var selected []string
	for _, m := range regexp.MustCompile(`\b(?:THEN|ELSE) (\d+)\b`).FindAllStringSubmatch(stmt, -1) {
		selected = append(selected, m[1])
	}
	var want []string
	for _, o := range outcomes {
		lit := postgres.SQLOutcome(o)
		want = append(want, lit)
		var got T
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT `+lit).Scan(&got))
		require.Equal(t, o, got, "%s: outcome %d", name, o)
	}
	slices.Sort(selected)
	require.Equal(t, want, slices.Compact(selected), "%s selects other outcomes than its constants", name)
}
