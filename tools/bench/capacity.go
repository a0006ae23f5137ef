package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/tools/bench/internal/capacity"
)

const capacityUsage = `Usage: bench capacity [flags]

Measures the key store on this machine in a scratch database
(labels_capacity_<random>, dropped at the end): bytes per record, purge rate,
the API's latency during a purge, daily partitions on expires_at, WAL per
request, scaled to 10x the seed's peak. Prints a report; --out writes JSON.

Flags:
  --records N        expired completed key records to fill and purge (default 1000000)
  --live N           completed keys not yet expired, replayed by the load (default 10000)
  --out FILE         write the report as JSON to FILE
  --sweep-batches L  comma-separated SWEEP_BATCH sizes to purge all N with;
                     the first is also used under load (default 1000,5000)
  --clients N        concurrent clients of the steady load (default 8)
  --rate R           requests per second of the steady load (default 400)
  --load-seconds D   length of a baseline load (default 15s)
  --max-load D       longest a load during a purge may run (default 5m)
  --pipeline N       requests sent through API, relay and worker for WAL per
                     request (default 4000)
  --saturation D     length of the closed-loop saturation run (default 8s)
  --keep             keep the scratch database

A small run, for a smoke test: --records 2000 --live 200 --pipeline 60
--load-seconds 1s --saturation 1s.

Environment: DATABASE_URL names the PostgreSQL server (its database name is
not used); without it, 127.0.0.1:5432, else a private server (internal/devdb).
Exit status: 0 done, 1 a measurement failed, 2 a bad flag.
`

// runCapacity is `bench capacity`: args[0] is "capacity".
func runCapacity(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	const name = "bench capacity"
	cfg := capacity.DefaultConfig()
	cfg.ServerURL = getenv("DATABASE_URL")
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.IntVar(&cfg.Records, "records", cfg.Records, "")
	fs.IntVar(&cfg.Live, "live", cfg.Live, "")
	fs.StringVar(&cfg.Out, "out", "", "")
	batches := fs.String("sweep-batches", "1000,5000", "")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "")
	fs.DurationVar(&cfg.LoadSeconds, "load-seconds", cfg.LoadSeconds, "")
	fs.DurationVar(&cfg.MaxLoad, "max-load", cfg.MaxLoad, "")
	fs.IntVar(&cfg.Pipeline, "pipeline", cfg.Pipeline, "")
	fs.DurationVar(&cfg.SatSeconds, "saturation", cfg.SatSeconds, "")
	fs.BoolVar(&cfg.Keep, "keep", false, "")
	if code, ok := cli.Parse(fs, args[1:], capacityUsage, stdout, stderr); !ok {
		return code
	}
	var err error
	if cfg.SweepBatches, err = parseInts(*batches); err != nil {
		fmt.Fprintf(stderr, "%s: --sweep-batches %q: %v\n", name, *batches, err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	cfg.LogFunc = progress(stderr)

	rep, err := capacity.Measure(ctx, cfg)
	if code, ok := measured(ctx, name, err, stderr); !ok {
		return code
	}
	rep.Command = strings.TrimSpace("go run ./tools/bench " + strings.Join(args, " "))
	capacity.PrintReport(stdout, rep)
	return writeJSON(name, cfg.Out, rep, stderr)
}

// measured says whether a subcommand's measurement is there to report: when
// not, it returns 130 if ctx was cancelled (the scratch database is dropped
// by then), else 1 after err on stderr, prefixed by name.
func measured(ctx context.Context, name string, err error, stderr io.Writer) (code int, ok bool) {
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "%s: interrupted; the scratch database is dropped\n", name)
		return 130, false
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1, false
	}
	return 0, true
}

// writeJSON writes rep as indented JSON to the file path names, if any, and
// returns the exit status: 1 after one line on stderr when it cannot.
func writeJSON(name, path string, rep any, stderr io.Writer) int {
	if path == "" {
		return 0
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err == nil {
		err = os.WriteFile(path, append(b, '\n'), 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
