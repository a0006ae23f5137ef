// Command chaos runs the label service as a fleet of its real binaries on a
// throwaway PostgreSQL server, disturbs it while two callers send it intents,
// and checks that nothing was lost, bought twice or answered wrongly (package
// tools/chaos/internal/chaos). It prints each check as a figure.
//
//	go tool task chaos [-- flags]
//	go run ./tools/chaos [flags]
//
// Exit status: 0 when every check held, 1 on any violation or when the run
// could not be carried out, 2 on a bad flag.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/tools/chaos/internal/chaos"
)

func main() { cli.Main("chaos", run) }

const usage = `Usage: chaos [flags]

Starts a private PostgreSQL server, the carrier simulator (latency, 503s,
dropped replies, timeouts), the API and N workers; sends intents from two
callers with repeats while it SIGKILLs a worker every few seconds, SIGKILLs the
API once and restarts PostgreSQL once; waits for the drain; checks every
outcome, the carrier's purchases, the replays and every answer.

Flags:
  --intents N          distinct intents, split between two callers (default 300)
  --duration D         the disturbed window; the drain follows it (default 90s)
  --workers N          worker processes (default 3)
  --kill-every D       pause between two worker SIGKILLs; 0 for none (default 5s)
  --seed N             seed of the intents, the victims and the simulator (default 1)
  --drain-timeout D    longest wait for the drain (default 5m)
  --bin DIR            use the api, worker and carrier binaries in DIR instead of building
  --log-dir DIR        write every process's output to DIR/NAME.log
  --pooler N           put PgBouncer (transaction mode, N server connections)
                       between the binaries and PostgreSQL; needs pgbouncer
  --quiet              print only the figures, not the progress

Needs Go and the PostgreSQL server binaries (initdb, pg_ctl); nothing else.
Exit status: 0 when every check held, 1 on a violation or a failed run, 2 on a bad flag.
`

func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) int {
	cfg := chaos.Config{
		Intents:      chaos.DefaultIntents,
		Duration:     chaos.DefaultDuration,
		Workers:      chaos.DefaultWorkers,
		KillEvery:    chaos.DefaultKillEvery,
		Seed:         chaos.DefaultSeed,
		DrainTimeout: chaos.DefaultDrainTimeout,
	}
	var quiet bool
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.IntVar(&cfg.Intents, "intents", cfg.Intents, "")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "")
	fs.DurationVar(&cfg.KillEvery, "kill-every", cfg.KillEvery, "")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "")
	fs.StringVar(&cfg.BinDir, "bin", "", "")
	fs.StringVar(&cfg.LogDir, "log-dir", "", "")
	fs.BoolVar(&quiet, "quiet", false, "")
	fs.IntVar(&cfg.PoolerSize, "pooler", 0, "")
	if code, ok := cli.Parse(fs, args[1:], usage, stdout, stderr); !ok {
		return code
	}
	if cfg.KillEvery == 0 {
		cfg.KillEvery = -1 // Config's zero means the default; the flag's 0 means none
	}
	if cfg.Seed == 0 {
		fmt.Fprintln(stderr, "chaos: --seed 0: want a non-zero seed")
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return 2
	}
	if !quiet {
		cfg.Progress = stderr
	}
	began := time.Now()
	figures, err := chaos.Run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "chaos: interrupted; everything it started is stopped")
			return 130
		}
		fmt.Fprintf(stderr, "chaos: the run could not be carried out after %.0fs: %v\n", time.Since(began).Seconds(), err)
		return 1
	}
	figures.Print(stdout)
	if !figures.OK() {
		return 1
	}
	return 0
}
