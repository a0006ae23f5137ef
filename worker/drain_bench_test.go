package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/worker"
)

// BenchmarkRelayDrain measures what the relay's intake costs the pipeline:
// 3,000 intents of one caller and 30 of another are queued with no worker
// running, then one worker (20 slots, an in-process carrier that answers at
// once, so the database is the bottleneck) drains them. Figures: labels a
// second from the worker's start to the last completion, and the other
// caller's last completion as a share of the drain (about 1 when it waits
// for the whole burst). It reports, it never fails on a figure:
//
//	go test -run '^$' -bench BenchmarkRelayDrain -benchtime 1x ./worker/
func BenchmarkRelayDrain(b *testing.B) {
	const burst, others = 3000, 30
	for range b.N {
		pool := fixture.DB(b, "burst", "other")
		ctx := context.Background()
		var rows []postgres.AcceptRow
		flush := func() {
			if _, err := postgres.Accept(ctx, pool, rows, postgres.AcceptOpts{LockTimeout: time.Second}); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
		for i := range burst {
			rows = append(rows, fixture.Accept("burst", fmt.Sprintf("b-%d", i), fmt.Sprintf("lr_b%d", i), int64(i+1)))
			if len(rows) == 64 {
				flush()
			}
		}
		flush()
		for i := range others {
			rows = append(rows, fixture.Accept("other", fmt.Sprintf("o-%d", i), fmt.Sprintf("lr_o%d", i), int64(i+1)))
		}
		flush()

		wctx, cancel := context.WithCancel(ctx)
		w, err := worker.New(worker.Config{
			Pool: pool, Carrier: stacktest.NewFakeCarrier(), Concurrency: 20, SweepInterval: -1,
			FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 20 * time.Millisecond, RelayPollInterval: 100 * time.Millisecond,
			Log: zerolog.Nop(),
		})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := w.Start(wctx); err != nil {
			b.Fatal(err)
		}
		for dbtest.Scalar[int](b, pool, `SELECT count(*) FROM label_intents WHERE status = 'pending'`) > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		elapsed := time.Since(start)
		var span, otherLast float64
		if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM max(completed_at) - min(completed_at)),
			extract(epoch FROM max(completed_at) FILTER (WHERE caller_id = 'other') - min(completed_at))
			FROM label_intents`).Scan(&span, &otherLast); err != nil {
			b.Fatal(err)
		}
		cancel()
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		_ = w.Stop(sctx)
		scancel()
		b.ReportMetric(float64(burst+others)/elapsed.Seconds(), "labels/s")
		b.ReportMetric(otherLast/span, "other_last_share")
	}
}
