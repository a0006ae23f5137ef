package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The statements over arrays ([Accept], [TakeLeases], [Complete]) run under the
// plan settings below, and this is the only place the project tunes the
// planner.
//
// Why: PostgreSQL would plan each run of such a statement anew (the generic
// plan of an unnest looks dearer than the custom ones), and planning a
// statement of several CTEs costs about as much as running it for a small
// batch. So they keep their generic plan (force_generic_plan). A generic plan
// is made once per connection with the statistics of that moment; on a table
// that was empty then (a fresh database, a store truncated or restored), a
// sequential scan or a hash join against the whole table looks cheapest and
// would stay for the life of the connection while the table grows. With
// sequential scans, hash and merge joins off, the one plan left is the one
// that is right at every size: each row of the batch probes the tables
// through their indexes. TestPlansProbe pins that plan on tables emptied
// after being full, the worst statistics there are.
const planSettings = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
       set_config('lock_timeout', $1, true)`

// sendShared runs the statements queued by queue in one transaction under
// planSettings and lockTimeout, sent in one round trip with its BEGIN and
// COMMIT. The results count only when it returns nil. beforeCommit, when not
// nil, runs between the statements and the commit (a second round trip), for
// tests that fail a transaction at that point.
func sendShared(ctx context.Context, pool *pgxpool.Pool, lockTimeout time.Duration, queue func(b *pgx.Batch), beforeCommit func(context.Context) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(planSettings, fmt.Sprintf("%dms", lockTimeout.Milliseconds()))
	queue(b)
	if beforeCommit == nil {
		b.Queue("COMMIT")
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		rollback(ctx, conn)
		return err
	}
	if beforeCommit != nil {
		if err := beforeCommit(ctx); err != nil {
			rollback(ctx, conn)
			return err
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			rollback(ctx, conn)
			return err
		}
	}
	return nil
}
