package chaos

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The full run's flags, after -args (go tool task chaos -- --intents 500).
var fullRun = struct {
	run, quiet, ha             *bool
	intents, workers, pooler   *int
	asyncKills                 *int
	seed                       *int64
	duration, killEvery, drain *time.Duration
	bin, logDir                *string
}{
	run:        flag.Bool("full", false, "the full chaos run (go tool task chaos), with the flags below"),
	intents:    flag.Int("intents", DefaultIntents, "distinct intents, split between two callers"),
	duration:   flag.Duration("duration", DefaultDuration, "the disturbed window; the drain follows it"),
	workers:    flag.Int("workers", DefaultWorkers, "worker processes"),
	killEvery:  flag.Duration("kill-every", DefaultKillEvery, "pause between two worker SIGKILLs; 0 for none"),
	seed:       flag.Int64("seed", DefaultSeed, "seed of the intents, the victims and the simulator (not 0)"),
	drain:      flag.Duration("drain-timeout", DefaultDrainTimeout, "longest wait for the drain"),
	bin:        flag.String("bin", "", "use the api, worker and carrier binaries in DIR instead of building"),
	logDir:     flag.String("log-dir", "", "write every process's output to DIR/NAME.log"),
	pooler:     flag.Int("pooler", 0, "put PgBouncer (transaction mode, N server connections) between the binaries and PostgreSQL; needs pgbouncer"),
	quiet:      flag.Bool("quiet", false, "print only the figures, not the progress"),
	ha:         flag.Bool("ha", false, "the failover runs instead (go tool task chaos HA=1), on pg_auto_failover formations; --intents and --duration (there 1200 and 300s by default) apply to the synchronous one"),
	asyncKills: flag.Int("async-kills", 3, "with --ha: primaries killed in the asynchronous run"),
}

// TestFullRun is the full chaos run, skipped unless -full: a private
// PostgreSQL server, the carrier simulator (latency, 503s, dropped replies,
// timeouts), the API and N workers; intents from two callers with repeats
// while a worker is SIGKILLed every few seconds, the API once and PostgreSQL
// restarted once; the drain; every outcome, the carrier's purchases, the
// replays and every answer checked. It prints the figures and fails on a
// violation. go tool task chaos runs it, from the module root:
//
//	go test -c -o .task/bin/chaos.test ./e2e/chaos
//	.task/bin/chaos.test -test.run '^TestFullRun$' -test.v -test.timeout 0 -full [--intents N ...]
func TestFullRun(t *testing.T) {
	f := fullRun
	if !*f.run {
		t.Skip("the full chaos run: go tool task chaos")
	}
	require.NotZero(t, *f.seed, "--seed 0: want a non-zero seed")
	var progress io.Writer
	if !*f.quiet {
		progress = os.Stderr
	}
	// Ctrl-C ends the run, which stops everything it started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *f.ha {
		fullFailover(ctx, t, progress)
		return
	}
	cfg := Config{Intents: *f.intents, Duration: *f.duration, Workers: *f.workers, KillEvery: *f.killEvery, Seed: *f.seed,
		DrainTimeout: *f.drain, BinDir: *f.bin, LogDir: *f.logDir, PoolerSize: *f.pooler, Progress: progress}
	if cfg.KillEvery == 0 {
		cfg.KillEvery = -1 // Config's zero means the default; the flag's 0 means none
	}
	require.NoError(t, cfg.Validate())
	began := time.Now()
	figures, err := Run(ctx, cfg)
	require.NoError(t, err, "the run could not be carried out after %.0fs", time.Since(began).Seconds())
	figures.Print(os.Stdout)
	require.True(t, figures.OK(), "violations: %v", figures.Violations)
}
