// Command bench measures the label service on this machine in one run,
// saturated and paced, and writes its figures next to what the database does
// with the accept's own transaction in the same run, held to the bar
// (report.go):
//
//	go tool task bench                  (the full run)
//	go tool task bench -- --quick       (a smoke run: short loads, small stores)
//	go tool task bench -- --long        (adds replays with 10 M keys in the store)
//
// It runs the real binaries (internal/fleet) against a throwaway database on a
// private PostgreSQL server (or --server), phase by phase as
// docs/benchmarks.md describes, and writes DIR/<date>.json, .md and .png.
// No figure makes the command fail (the report gives the bar's verdict):
// benchmarks measure, tests check. Exit status: 0 when every phase ran, 1
// when a phase failed (the report is still written, naming it), 2 on a bad
// flag, 130 when interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/proc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const (
	usageHead = `Usage: bench [flags]

Measures the label service on this machine against the pgbench ceiling of its
own accept transaction, and writes DIR/<date>.json, .md and .png.

Flags:
`
	usageTail = `
Without --server the private server is started from the installed PostgreSQL
binaries (initdb, pg_ctl; as internal/devdb does), listens on 127.0.0.1 only,
and is stopped and deleted at the end.
`
)

// Phases, in the order they run.
const (
	PhaseCeiling = "ceiling"
	PhaseAccept  = "accept"
	PhaseLive    = "live"
	PhaseE2E     = "e2e"
	PhasePaced   = "paced"
	PhaseReplay  = "replay"
	PhaseStore   = "store"
)

// workerConcurrency is the worker's WORKER_CONCURRENCY: Little's law for
// 4,000 labels/s, the bar's 0.4 share of a 10,000 tps ceiling, when a job
// holds its slot 91 ms at 50 ms carrier latency and waits up to River's fetch
// cooldown of 100 ms for the next (cmd/worker's own default is 100;
// docs/decisions.md).
const workerConcurrency = 1000

var allPhases = []string{PhaseCeiling, PhaseAccept, PhaseLive, PhaseE2E, PhasePaced, PhaseReplay, PhaseStore}

// Loads is the part of the configuration that the results repeat as it is
// (their setup).
type Loads struct {
	Rounds            int       `json:"rounds"`
	Concurrency       []int     `json:"concurrency"`
	RepeatShare       float64   `json:"repeat_share"`
	E2ECreates        int       `json:"e2e_creates"`
	E2EConcurrency    int       `json:"e2e_concurrency"`
	PacedRates        []float64 `json:"paced_rates"`
	ReplayConcurrency int       `json:"replay_concurrency"`
	ReplayRate        float64   `json:"replay_rate"`
	Phases            []string  `json:"phases"`
	// WorkerConcurrency is the worker's WORKER_CONCURRENCY (workerConcurrency).
	WorkerConcurrency int `json:"worker_concurrency"`
	// BurstReplays replays at BurstConcurrency, closed loop, follow each
	// end-to-end burst.
	BurstReplays     int `json:"burst_replays"`
	BurstConcurrency int `json:"burst_concurrency"`
}

// Config is one run's configuration, read once in run.
type Config struct {
	Loads
	Mode      string // full, quick or long
	Out       string
	ServerURL string // empty: a private server
	Duration  time.Duration
	// PacedDuration is each paced phase's length (its creates' and pgbench's).
	PacedDuration time.Duration
	Warmup        time.Duration
	SimLatencies  []time.Duration
	ReplaySizes   []int
	PurgeMax      time.Duration
	BinDir        string
	Keep          bool
	// Command is what the report says was run.
	Command string
	// LogFunc receives progress lines.
	LogFunc func(format string, args ...any)
}

// has reports whether the phase is to run.
func (c *Config) has(phase string) bool { return slices.Contains(c.Phases, phase) }

// Validate checks what parsing alone cannot.
func (c *Config) Validate() error {
	type bound struct {
		flag      string
		v, lo, hi float64
	}
	bounds := []bound{
		{"duration", c.Duration.Seconds(), 0.5, 600}, {"rounds", float64(c.Rounds), 1, 20},
		{"warmup", c.Warmup.Seconds(), 0, 60}, {"repeat-share", c.RepeatShare, 0, 0.999999},
		{"e2e-creates", float64(c.E2ECreates), 1, 1_000_000}, {"e2e-concurrency", float64(c.E2EConcurrency), 1, 1000},
		{"paced-duration", c.PacedDuration.Seconds(), 1, 3600}, {"burst-replays", float64(c.BurstReplays), 1, 1_000_000},
		{"burst-concurrency", float64(c.BurstConcurrency), 1, 1000},
		{"replay-concurrency", float64(c.ReplayConcurrency), 1, 1000}, {"replay-rate", c.ReplayRate, 1e-9, 100_000},
		{"purge-max", c.PurgeMax.Seconds(), 1e-9, math.Inf(1)},
	}
	for _, n := range c.Concurrency {
		bounds = append(bounds, bound{"concurrency", float64(n), 1, 1000})
	}
	for _, r := range c.PacedRates {
		bounds = append(bounds, bound{"paced-rates", r, 1, 100_000})
	}
	for _, n := range c.ReplaySizes {
		bounds = append(bounds, bound{"replay-sizes", float64(n), 10, 100_000_000})
	}
	for _, d := range c.SimLatencies {
		bounds = append(bounds, bound{"sim-latencies", d.Seconds(), 0, 10})
	}
	for _, b := range bounds {
		if b.v < b.lo || b.v > b.hi {
			return fmt.Errorf("--%s %g: %g to %g (seconds for a duration)", b.flag, b.v, b.lo, b.hi)
		}
	}
	switch {
	case len(c.Concurrency) == 0:
		return errors.New("--concurrency: at least one")
	case !slices.IsSorted(c.ReplaySizes):
		return errors.New("--replay-sizes: give them in increasing order")
	}
	for _, p := range c.Phases {
		if !slices.Contains(allPhases, p) {
			return fmt.Errorf("--phases: unknown phase %q (known: %s)", p, strings.Join(allPhases, ","))
		}
	}
	if c.ServerURL != "" && !strings.Contains(c.ServerURL, "127.0.0.1") && !strings.Contains(c.ServerURL, "localhost") && !strings.Contains(c.ServerURL, "[::1]") {
		return fmt.Errorf("--server %q: loopback servers only", c.ServerURL)
	}
	return fleet.CheckBinDir(c.BinDir)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg := Config{Mode: "full", Loads: Loads{WorkerConcurrency: workerConcurrency}, ReplaySizes: []int{10_000, 1_000_000}}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "a smoke run: 3 s loads, 1 k and 10 k keys, 300 creates end to end, 10 s paced phases")
	long := fs.Bool("long", false, "also replay with 10 M keys in the store")
	fs.StringVar(&cfg.Out, "out", "", "DIR where the results go (default bench/results at the module root)")
	fs.StringVar(&cfg.ServerURL, "server", "", "URL of a PostgreSQL server to use (a throwaway labels_bench_* database\n\tis created on it and dropped) instead of a private one")
	fs.DurationVar(&cfg.Duration, "duration", 15*time.Second, "length of each measured load (--quick 3s)")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured load before each")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "the ceiling and the accept at one concurrency alternate in N rounds\n\tof duration/N each, merged (--quick 1)")
	conc := fs.String("concurrency", "8,32,128", "client concurrencies")
	fs.Float64Var(&cfg.RepeatShare, "repeat-share", 0.1, "share of accept requests that repeat an earlier key and body")
	fs.IntVar(&cfg.E2ECreates, "e2e-creates", 16000, "creates sent end to end per simulator latency (--quick 300)")
	fs.IntVar(&cfg.E2EConcurrency, "e2e-concurrency", 32, "clients of the end-to-end run")
	rates := fs.String("paced-rates", "400,2000", "create rates of the paced phases, each open loop through the whole pipeline\n\t(simulator at 50 ms) beside pgbench -R at the same rate")
	fs.DurationVar(&cfg.PacedDuration, "paced-duration", time.Minute, "length of each paced phase (--quick 10s)")
	lats := fs.String("sim-latencies", "0s,50ms", "simulator latencies end to end")
	fs.IntVar(&cfg.BurstReplays, "burst-replays", 2000, "keys of each end-to-end burst replayed right after it is final, closed\n\tloop, then read by primary key by pgbench (--quick 300)")
	fs.IntVar(&cfg.BurstConcurrency, "burst-concurrency", 16, "clients of the replays after each burst and of their primary-key read")
	sizes := fs.String("replay-sizes", "", "keys in the store for the replays (default 10000,1000000; --long adds\n\t10000000; --quick 1000,10000)")
	fs.IntVar(&cfg.ReplayConcurrency, "replay-concurrency", 8, "clients of the replay runs")
	fs.Float64Var(&cfg.ReplayRate, "replay-rate", 400, "replays per second of the paced replay run, whose p50/p99 are held to\n\tthe bar (the seed's average create rate, all of it replays)")
	fs.DurationVar(&cfg.PurgeMax, "purge-max", 20*time.Second, "longest the purge measurement runs (--quick 5s)")
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to run (live is the accept with the pipeline live)")
	fs.StringVar(&cfg.BinDir, "bin", "", "DIR of prebuilt binaries (api, worker, carrier) instead of building them")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the database (and the private server's directory)")
	if code, ok := cli.Parse(fs, args[1:], cli.Usage(fs, usageHead, usageTail), stdout, stderr); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick && *long {
		fmt.Fprintln(stderr, "bench: --quick and --long exclude each other")
		return 2
	}
	// The modes change the defaults; a flag given explicitly wins.
	switch {
	case *quick:
		cfg.Mode = "quick"
		for name, apply := range map[string]func(){
			"duration":       func() { cfg.Duration = 3 * time.Second },
			"rounds":         func() { cfg.Rounds = 1 },
			"e2e-creates":    func() { cfg.E2ECreates = 300 },
			"paced-duration": func() { cfg.PacedDuration = 10 * time.Second },
			"burst-replays":  func() { cfg.BurstReplays = 300 },
			"purge-max":      func() { cfg.PurgeMax = 5 * time.Second },
		} {
			if !set[name] {
				apply()
			}
		}
		cfg.ReplaySizes = []int{1_000, 10_000}
	case *long:
		cfg.Mode = "long"
		cfg.ReplaySizes = []int{10_000, 1_000_000, 10_000_000}
	}
	var errs [4]error
	cfg.Concurrency, errs[0] = cli.List("concurrency", *conc, strconv.Atoi)
	if *sizes != "" {
		cfg.ReplaySizes, errs[1] = cli.List("replay-sizes", *sizes, strconv.Atoi)
	}
	cfg.SimLatencies, errs[2] = cli.List("sim-latencies", *lats, time.ParseDuration)
	cfg.PacedRates, errs[3] = cli.List("paced-rates", *rates, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
	cfg.Phases, _ = cli.List("phases", *phases, func(p string) (string, error) { return p, nil })
	if err := errors.Join(errs[:]...); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	if cfg.Out == "" {
		root, err := proc.ModuleRoot()
		if err != nil {
			fmt.Fprintf(stderr, "bench: --out not given and %v\n", err)
			return 2
		}
		cfg.Out = filepath.Join(root, "bench", "results")
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	cfg.Command = strings.TrimSpace("go -C tools run ./bench " + strings.Join(args[1:], " "))
	cfg.LogFunc = cli.Progress(stderr)

	res, err := Run(ctx, cfg)
	if res != nil {
		files, werr := Write(cfg.Out, res)
		if werr != nil {
			fmt.Fprintf(stderr, "bench: writing the results: %v\n", werr)
			return 1
		}
		fmt.Fprintln(stdout, Markdown(res))
		for _, f := range files {
			fmt.Fprintf(stdout, "wrote %s\n", f)
		}
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "bench: interrupted; everything it started is stopped")
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	return 0
}
