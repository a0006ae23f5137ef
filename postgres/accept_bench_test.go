package postgres_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/proc"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// BenchmarkAcceptShared runs the accept's shared transaction ([postgres.Accept])
// with 1, 2, 8 and 32 accepts in it, one transaction at a time on one
// connection, and reports the CPU its PostgreSQL backend spent on each
// (backend-µs/tx, read from /proc: a server on this machine) beside the wall
// time: what one shared commit costs the server, and what each accept in it
// adds (docs/design.md, The cost of a label at a moderate rate).
//
//	go test -run '^$' -bench BenchmarkAcceptShared -benchtime 1000x ./postgres/
func BenchmarkAcceptShared(b *testing.B) {
	for _, n := range []int{1, 2, 8, 32} {
		b.Run(fmt.Sprintf("accepts=%d", n), func(b *testing.B) {
			_, url := dbtest.New(b)
			cfg, err := pgxpool.ParseConfig(url)
			require.NoError(b, err)
			cfg.MaxConns = 1 // one backend, whose CPU is the figure
			ctx := context.Background()
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(b, err)
			b.Cleanup(pool.Close)
			fixture.Caller(b, pool, "c")
			var pid int
			require.NoError(b, pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				b.Skipf("the server's backend is not on this machine: %v", err)
			}
			order := int64(0)
			var cpu float64 // seconds
			for b.Loop() {
				b.StopTimer()
				rows := make([]postgres.AcceptRow, n)
				for i := range rows {
					order++
					rows[i] = fixture.Accept("c", fmt.Sprintf("label:%d:1:v1", order), fmt.Sprintf("lr_c_%d", order), order)
				}
				before := proc.ProcessCPU(pid, false)
				b.StartTimer()
				_, err := postgres.Accept(ctx, pool, rows, postgres.AcceptOpts{LockTimeout: time.Second})
				b.StopTimer()
				require.NoError(b, err)
				cpu += proc.ProcessCPU(pid, false) - before
				b.StartTimer()
			}
			b.ReportMetric(cpu*1e6/float64(b.N), "backend-µs/tx")
			b.ReportMetric(cpu*1e6/float64(b.N*n), "backend-µs/accept")
		})
	}
}
