package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/reconcile"
)

// defaultVoidWait bounds how long `reconcile void` waits for the outcomes: a
// void is one carrier call, and a worker retries one with no answer after
// about a second, then two, four…; what is still pending after it is left
// to the workers, and shown as pending.
const defaultVoidWait = 2 * time.Minute

// VoidConfig is everything `reconcile void` is started with.
type VoidConfig struct {
	DatabaseURL string
	Pooled      bool // DATABASE_POOLED
	LogLevel    zerolog.Level
	LogFormat   string

	RunID    int64
	Category string
	DryRun   bool
	Format   string
	Out      string
	Wait     time.Duration
}

const voidUsage = `Usage: reconcile void --run RUN_ID [--category duplicate_charge|billed_without_label] [--dry-run]
                      [--format text|json|csv] [--out FILE] [--wait DURATION]

Voids, at the carrier, the extra purchases a saved reconcile run found: for each
duplicate_charge, every carrier label but the label's own; with --category
billed_without_label, the labels bought under a carrier key of ours that no
label of ours holds. It never voids a label that a label of ours or a completed
key names, nor one bought for an intent still pending. Each void is a River job
(run by the workers), unique per carrier label and sent under the label's own
void key, so a rerun, a crash or two operators at once void each label once.
It waits for the outcomes and prints each item's: voided, window_closed,
not_found, failed, pending (no answer within --wait), or kept (with the reason).
Exit status: 0 when every targeted label is voided (or was), 1 when some is not,
2 on an error. --dry-run prints what would be voided, changes nothing, exits 0.

Flags:
  --run RUN_ID        the run (reconcile prints its id first)
  --category NAME     duplicate_charge or billed_without_label (default duplicate_charge)
  --dry-run           print what would be voided and change nothing
  --format FORMAT     text, json or csv (default text)
  --out FILE          write the report to FILE instead of standard output
  --wait DURATION     how long to wait for the outcomes (default 2m; 0s: do not wait)

Environment:
  DATABASE_URL   PostgreSQL connection string (default postgres://localhost:5432/labels?sslmode=disable;
                 when unset and PGHOST or PGDATABASE is set, the PG* variables)
  LOG_LEVEL      debug, info, warn or error (default info)
  LOG_FORMAT     json or console (default json)

The workers call the carrier (their CARRIER_URL and CARRIER_TOKEN); this command
does not.
`

func parseVoidConfig(args []string, getenv func(string) string) (cfg VoidConfig, help bool, err error) {
	cenv := &cli.Env{Getenv: getenv}
	db := cenv.Database()
	if cenv.Err != nil {
		return cfg, false, cenv.Err
	}
	cfg.DatabaseURL, cfg.Pooled = db.URL, db.Pooled
	level := getenv("LOG_LEVEL")
	if level == "" {
		level = "info"
	}
	switch level {
	case "debug", "info", "warn", "error":
		cfg.LogLevel, _ = zerolog.ParseLevel(level)
	default:
		return cfg, false, fmt.Errorf("invalid LOG_LEVEL %q: want debug, info, warn or error", level)
	}
	if cfg.LogFormat = getenv("LOG_FORMAT"); cfg.LogFormat == "" {
		cfg.LogFormat = "json"
	}
	if cfg.LogFormat != "json" && cfg.LogFormat != "console" {
		return cfg, false, fmt.Errorf("invalid LOG_FORMAT %q: want json or console", cfg.LogFormat)
	}

	fs := flag.NewFlagSet("reconcile void", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var run, wait string
	fs.StringVar(&run, "run", "", "")
	fs.StringVar(&cfg.Category, "category", reconcile.DuplicateCharge, "")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "")
	fs.StringVar(&cfg.Format, "format", "text", "")
	fs.StringVar(&cfg.Out, "out", "", "")
	fs.StringVar(&wait, "wait", defaultVoidWait.String(), "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, true, nil
		}
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if run == "" {
		return cfg, false, errors.New("give --run RUN_ID (the id reconcile printed)")
	}
	if cfg.RunID, err = strconv.ParseInt(run, 10, 64); err != nil || cfg.RunID <= 0 {
		return cfg, false, fmt.Errorf("invalid --run %q: want a run id, a positive integer", run)
	}
	if cfg.Category != reconcile.DuplicateCharge && cfg.Category != reconcile.BilledWithoutLabel {
		return cfg, false, fmt.Errorf("invalid --category %q: want duplicate_charge or billed_without_label", cfg.Category)
	}
	if cfg.Format != "text" && cfg.Format != "json" && cfg.Format != "csv" {
		return cfg, false, fmt.Errorf("invalid --format %q: want text, json or csv", cfg.Format)
	}
	if cfg.Wait, err = duration("--wait", wait); err != nil {
		return cfg, false, err
	}
	if _, err := pgxpool.ParseConfig(cfg.DatabaseURL); err != nil {
		return cfg, false, fmt.Errorf("invalid DATABASE_URL: %v", redact(err))
	}
	return cfg, false, nil
}

// runVoid is `reconcile void`. args follow "void".
func runVoid(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, help, err := parseVoidConfig(args, getenv)
	if help {
		fmt.Fprint(stdout, voidUsage)
		return exitMatched
	}
	if err != nil {
		fmt.Fprintf(stderr, "reconcile void: %v\n", err)
		return exitError
	}
	log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat).With().Str("command", "void").Logger()

	// The first signal ends the wait (the voids go on in the workers) and
	// prints what is known; a second one exits at once.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		select {
		case <-signals:
			log.Warn().Msg("signal received: no more waiting; the workers go on with the voids")
			cancel()
		case <-ctx.Done():
			return
		}
		select {
		case <-signals:
			os.Exit(exitError)
		case <-ctx.Done():
		}
	}()

	rep, err := voidOnce(ctx, cfg)
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.Is(err, reconcile.ErrNoRun):
			fmt.Fprintf(stderr, "reconcile void: no run %d is saved\n", cfg.RunID)
		case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703"):
			log.Error().Err(err).Msg("void failed (is the database migrated? run: api migrate)")
		default:
			log.Error().Err(err).Msg("void failed")
		}
		return exitError
	}
	log.Debug().Int64("run_id", rep.RunID).Str("category", rep.Category).Bool("dry_run", rep.DryRun).
		Interface("counts", rep.Counts).Msg("void done")
	if err := writeVoidReport(cfg, rep, stdout); err != nil {
		log.Error().Err(err).Msg("writing the void report failed (the voids are recorded)")
		return exitError
	}
	return rep.ExitCode()
}

func voidOnce(ctx context.Context, cfg VoidConfig) (*reconcile.VoidReport, error) {
	db, err := postgres.ParseEndpoints(cfg.DatabaseURL, "", cfg.Pooled)
	if err != nil {
		return nil, err
	}
	poolCfg := db.Pool
	poolCfg.MaxConns = 2
	if poolCfg.ConnConfig.ConnectTimeout == 0 {
		poolCfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	// An insert-only River client: the workers run the jobs.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, err
	}
	return reconcile.Void(ctx, pool, reconcile.VoidOpts{
		RunID:    cfg.RunID,
		Category: cfg.Category,
		DryRun:   cfg.DryRun,
		Enqueue:  jobs.EnqueueVoids(client),
		Wait:     cfg.Wait,
	})
}

// writeVoidReport writes the report to stdout, or to --out (see [writeAtomically]).
func writeVoidReport(cfg VoidConfig, rep *reconcile.VoidReport, stdout io.Writer) error {
	write := rep.WriteText
	switch cfg.Format {
	case "json":
		write = rep.WriteJSON
	case "csv":
		write = rep.WriteCSV
	}
	if cfg.Out == "" {
		return write(stdout)
	}
	return writeAtomically(cfg.Out, write)
}
