package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/tools/bench/internal/pooler"
)

const poolerUsage = `Usage: bench pooler [flags]

Measures a fleet on one PostgreSQL server with and without PgBouncer in
transaction mode (package internal/pooler): for each fleet of N APIs and M
workers (the real binaries, in a scratch database labels_pooler_<random>),
in each mode (direct: straight to PostgreSQL; pooled: through PgBouncer with
DATABASE_DIRECT_URL for LISTEN; polled: through PgBouncer without it;
describe: direct with the pooled runs' statement mode, pgx's cache_describe), the
server connections idle and at the peak of a closed-loop load
(pg_stat_activity), and the labels bought per second end to end (new
intents, Prefer: wait=10). Prints a table; --out writes JSON.

Flags:
  --fleets LIST     comma-separated APIsxWorkers (default 1x1,2x4,5x10,10x20)
  --modes LIST      comma-separated modes: direct, pooled, polled, describe
                    (default direct,pooled,polled)
  --pool-size N     PgBouncer's default_pool_size (default 20)
  --clients N       closed-loop clients of each load (default 32)
  --load D          each load's length (default 10s)
  --repeat N        run each fleet's modes N times, alternating (default 1);
                    the table shows the median
  --bin DIR         use prebuilt api, worker and carrier binaries in DIR
  --out FILE        write the report as JSON to FILE

Environment: DATABASE_URL names the PostgreSQL server (its database name is
not used); without it, 127.0.0.1:5432, else a private server. Needs the
pgbouncer binary (go tool task pgbouncer installs it).
Exit status: 0 done, 1 a measurement failed, 2 a bad flag.
`

// runPooler is `bench pooler`: args[0] is "pooler".
func runPooler(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	const name = "bench pooler"
	cfg := pooler.Config{ServerURL: getenv("DATABASE_URL")}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fleets := fs.String("fleets", "1x1,2x4,5x10,10x20", "")
	fs.IntVar(&cfg.PoolSize, "pool-size", 20, "")
	fs.IntVar(&cfg.Clients, "clients", 32, "")
	fs.DurationVar(&cfg.Load, "load", 10*time.Second, "")
	fs.IntVar(&cfg.Repeat, "repeat", 1, "")
	fs.StringVar(&cfg.BinDir, "bin", "", "")
	out := fs.String("out", "", "")
	modes := fs.String("modes", "direct,pooled,polled", "")
	if code, ok := cli.Parse(fs, args[1:], poolerUsage, stdout, stderr); !ok {
		return code
	}
	for _, f := range strings.Split(*fleets, ",") {
		a, w, ok := strings.Cut(strings.TrimSpace(f), "x")
		n, err1 := strconv.Atoi(a)
		m, err2 := strconv.Atoi(w)
		if !ok || err1 != nil || err2 != nil || n < 1 || m < 1 || n > 50 || m > 50 {
			fmt.Fprintf(stderr, "%s: --fleets %q: want APIsxWorkers such as 2x4, each 1 to 50\n", name, f)
			return 2
		}
		cfg.Fleets = append(cfg.Fleets, pooler.Fleet{APIs: n, Workers: m})
	}
	for _, m := range strings.Split(*modes, ",") {
		switch m = strings.TrimSpace(m); m {
		case pooler.Direct, pooler.Pooled, pooler.Polled, pooler.Describe:
			cfg.Modes = append(cfg.Modes, m)
		default:
			fmt.Fprintf(stderr, "%s: --modes: unknown mode %q (known: direct, pooled, polled, describe)\n", name, m)
			return 2
		}
	}
	if cfg.PoolSize < 1 || cfg.Clients < 1 || cfg.Repeat < 1 || cfg.Load < time.Second {
		fmt.Fprintf(stderr, "%s: --pool-size, --clients and --repeat must be positive, --load at least 1s\n", name)
		return 2
	}
	cfg.Log = progress(stderr)
	rep, err := pooler.Measure(ctx, cfg)
	if code, ok := measured(ctx, name, err, stderr); !ok {
		return code
	}
	rep.Print(stdout)
	return writeJSON(name, *out, rep, stderr)
}
