// Package pgbouncertest starts a real PgBouncer in transaction mode (the
// installed binary, through internal/pgbouncer) in front of a test's
// PostgreSQL server, for the length of a test.
package pgbouncertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/labelkit/labels/internal/pgbouncer"
)

// Start starts PgBouncer in transaction mode with server_reset_query empty
// and poolSize server connections per database and user, in front of the
// server of serverURL, and returns it; it stops when the test ends. Without
// an installed pgbouncer the test is skipped, saying how to install it
// (`go tool task test` does).
func Start(tb testing.TB, serverURL string, poolSize int) *pgbouncer.Bouncer {
	tb.Helper()
	if _, err := pgbouncer.Binary(); errors.Is(err, pgbouncer.ErrNotInstalled) {
		tb.Skipf("%v; `go tool task test` installs it as root", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Server: serverURL, PoolSize: poolSize})
	if err != nil {
		tb.Fatalf("pgbouncertest: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("pgbouncer's last output:\n%s", b.Output())
		}
		b.Stop()
	})
	return b
}
