package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"
)

type asOfKey struct{}

// AsOf returns ctx with a time that the purges ([Purge], [PurgeTombstones],
// [PurgeWebhookEvents], [PurgeFailedIntents], [PurgeLabels], and package
// reconcile's) read in place of the database's now(): a simulated clock, for
// the fill test (e2e, TestFill), which runs the sweep over simulated days,
// and the key-store benchmark (tools/bench). The services never set it:
// every purge they run compares with now().
func AsOf(ctx context.Context, at time.Time) context.Context {
	return context.WithValue(ctx, asOfKey{}, at)
}

// PurgeSQL returns a purge statement as it runs under ctx: unchanged, or,
// under [AsOf], with each now() read as parameter $n, and the arguments to
// append for it. Only the purges' statements go through it: their now() is
// the clock they compare with and nothing else.
func PurgeSQL(ctx context.Context, sql string, n int) (string, []any) {
	at, ok := ctx.Value(asOfKey{}).(time.Time)
	if !ok {
		return sql, nil
	}
	return strings.ReplaceAll(sql, "now()", fmt.Sprintf("$%d::timestamptz", n)), []any{at}
}
