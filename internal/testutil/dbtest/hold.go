package dbtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// HoldingSession connects to url with a session of its own and begins a
// transaction in it that nothing times out (no idle-in-transaction,
// statement or lock timeout): a process frozen inside its transaction, for
// the tests of what a held row does to the others. The transaction is
// rolled back and the session closed by release, at the latest when t ends.
func HoldingSession(t testing.TB, url string) (conn *pgx.Conn, release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, _ = conn.Exec(context.Background(), "ROLLBACK")
			_ = conn.Close(context.Background())
		})
	}
	t.Cleanup(release)
	for _, sql := range []string{
		"SET idle_in_transaction_session_timeout = 0", "SET statement_timeout = 0", "SET lock_timeout = 0", "BEGIN",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("dbtest: %s: %v", sql, err)
		}
	}
	return conn, release
}
