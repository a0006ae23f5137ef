// Command demo runs the label service end to end on this machine and narrates
// it: a fresh database, the carrier simulator, the API and a worker, a caller
// and its webhook receiver; the seed's example three times (202 polled to
// succeeded, its webhook verified with client.VerifyWebhook, the 201 replay,
// the 422 for a changed body), the carrier's view and a reconciliation; last
// a duplicate bought from a carrier without keys, found, voided through the
// worker (`reconcile void`) and netted. Then it stops everything it started.
//
//	go tool task demo            (DATABASE_URL from tools/devdb)
//	go -C tools run ./demo [flags]
//
// Every step checks the answer it expects, so the demo doubles as a smoke test:
// it exits 0 when all went as described, 1 otherwise (with the last log lines
// of every process), 2 on a bad flag, 130 when interrupted. A first Ctrl-C
// stops what it started, gracefully and in order; a second kills it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/internal/fleet"
)

func main() { cli.Exit(run) }

const usage = `Usage: demo [flags]

Runs the label service end to end (carrier simulator, API, worker) against a
fresh database and narrates the seed's example: 202, polled to succeeded, the
signed webhook to a local receiver and its verification, the 201 replay, the
422 for a changed body, the carrier's view and a reconciliation;
then a duplicate bought from a carrier without keys, found, voided, netted.

Flags:
`

const usageTail = `
Environment: DATABASE_URL names the PostgreSQL server (its database name is
not used); without it, 127.0.0.1:5432, else a private server under .pgdata
(see internal/devdb).
`

// Config is the demo's configuration, read once in run.
type Config struct {
	// ServerURL names the PostgreSQL server (DATABASE_URL); empty lets devdb choose.
	ServerURL string
	// Database is dropped and created afresh on that server.
	Database string
	// BinDir holds prebuilt binaries; empty means build them.
	BinDir string
	// Verbose copies the processes' log lines to stderr.
	Verbose bool
}

// demoDatabase guards the DROP DATABASE: only a database made for the demo.
var demoDatabase = regexp.MustCompile(`^labels_demo[a-z0-9_]{0,40}$`)

// Validate checks the values that parsing alone cannot.
func (c *Config) Validate() error {
	if !demoDatabase.MatchString(c.Database) {
		return fmt.Errorf("--database %q: the demo drops it, so it must be labels_demo followed by at most 40 of a-z, 0-9, _", c.Database)
	}
	return fleet.CheckBinDir(c.BinDir)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg := Config{ServerURL: getenv("DATABASE_URL"), Database: "labels_demo"}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.StringVar(&cfg.Database, "database", cfg.Database, "NAME of the database to drop and create afresh on the server of\n\tDATABASE_URL (it must start with labels_demo)")
	fs.StringVar(&cfg.BinDir, "bin", cfg.BinDir, "DIR of prebuilt binaries (api, worker, carrier, reconcile) instead of\n\tbuilding ./cmd/... into a temporary directory")
	fs.BoolVar(&cfg.Verbose, "verbose", cfg.Verbose, "copy every process's log lines to stderr")
	if code, ok := cli.ParseValid(fs, args[1:], cli.Usage(fs, usage, usageTail), cfg.Validate, stdout, stderr); !ok {
		return code
	}

	// The processes' log lines arrive on their own goroutines.
	stderr = &cli.LockedWriter{W: stderr}
	// The first SIGINT or SIGTERM stops what the demo started; a second
	// cancels hurry, and it kills what it is still stopping gracefully.
	hurry, cancelHurry := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHurry()
	ctx, stopSignals := cli.SignalContext(ctx, func() {
		fmt.Fprintln(stderr, "demo: second signal: killing what still runs")
		cancelHurry()
	})
	defer stopSignals()
	d := newDemo(cfg, stdout, stderr)
	err := d.run(ctx)
	stopErr := d.stopAll(hurry)
	d.cleanup()
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "demo: interrupted; everything it started is stopped")
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "\ndemo: FAILED: %v\n", err)
		d.dumpLogs()
		return 1
	case stopErr != nil:
		fmt.Fprintf(stderr, "\ndemo: FAILED while stopping: %v\n", stopErr)
		return 1
	}
	d.summary()
	return 0
}
