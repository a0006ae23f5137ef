package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/reconcile"
	"github.com/labelkit/labels/worker"
)

// defaultVoidWait bounds how long `reconcile void` waits for the outcomes: a
// void is one carrier call, and a worker retries one with no answer after
// about a second, then two, four…; what is still pending after it is left
// to the workers, and shown as pending.
const defaultVoidWait = 2 * time.Minute

// VoidConfig is everything `reconcile void` is started with.
type VoidConfig struct {
	Settings

	RunID    int64
	Category string
	DryRun   bool
	Format   string
	Out      string
	Wait     time.Duration
}

// voidUsage is built from the defaults, the ones the configuration is read
// with.
var voidUsage = fmt.Sprintf(`Usage: reconcile void --run RUN_ID [--category duplicate_charge|billed_without_label] [--dry-run]
                      [--format text|json|csv] [--out FILE] [--wait DURATION]

Voids, at the carrier, the extra purchases a saved reconcile run found: for each
duplicate_charge, every carrier label but the label's own; with --category
billed_without_label, the labels bought under a carrier key of ours that no
label of ours holds. It never voids a label that a label of ours or a completed
key names, nor one that an intent still pending may receive (named by the
reference or carrier key of a line billing the label): that one is kept, and a
later run of this command decides again once the intent is final. Each void is a River job
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
  --wait DURATION     how long to wait for the outcomes (default %s; 0s: do not wait)

Environment:
  DATABASE_URL   PostgreSQL connection string (default %s;
                 when unset and PGHOST or PGDATABASE is set, the PG* variables)
  LOG_LEVEL      debug, info, warn or error (default %s)
  LOG_FORMAT     json or console (default %s)

The workers call the carrier (their CARRIER_URL and CARRIER_TOKEN); this command
does not.
`, cli.Dur(defaultVoidWait), cli.DefaultDatabaseURL, cli.DefaultLogLevel, cli.DefaultLogFormat)

func parseVoidConfig(ctx context.Context, args []string, getenv func(string) string) (cfg VoidConfig, err error) {
	if cfg.Settings, err = parseSettings(ctx, getenv); err != nil {
		return cfg, err
	}

	fs := newFlagSet("reconcile void")
	var run, wait string
	fs.StringVar(&run, "run", "", "")
	fs.StringVar(&cfg.Category, "category", reconcile.DuplicateCharge, "")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "")
	fs.StringVar(&cfg.Format, "format", "text", "")
	fs.StringVar(&cfg.Out, "out", "", "")
	fs.StringVar(&wait, "wait", defaultVoidWait.String(), "")
	if err := parseFlags(fs, args); err != nil {
		return cfg, err
	}
	if run == "" {
		return cfg, errors.New("give --run RUN_ID (the id reconcile printed)")
	}
	if cfg.RunID, err = strconv.ParseInt(run, 10, 64); err != nil || cfg.RunID <= 0 {
		return cfg, fmt.Errorf("invalid --run %q: want a run id, a positive integer", run)
	}
	if cfg.Category != reconcile.DuplicateCharge && cfg.Category != reconcile.BilledWithoutLabel {
		return cfg, fmt.Errorf("invalid --category %q: want duplicate_charge or billed_without_label", cfg.Category)
	}
	if err := checkFormat(cfg.Format); err != nil {
		return cfg, err
	}
	if cfg.Wait, err = duration("--wait", wait); err != nil {
		return cfg, err
	}
	return cfg, cfg.checkDatabaseURL()
}

// runVoid is `reconcile void`. args follow "void".
func runVoid(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseVoidConfig(ctx, args, getenv)
	if code, ok := refuse(err, "reconcile void", voidUsage, stdout, stderr); !ok {
		return code
	}
	log := cfg.newLogger(stderr).With().Str("command", "void").Logger()

	// The first signal ends the wait (the voids go on in the workers) and
	// prints what is known; a second one exits at once.
	ctx, stop := withSignals(ctx, func(cancel context.CancelFunc) {
		log.Warn().Msg("signal received: no more waiting; the workers go on with the voids")
		cancel()
	}, func(context.CancelFunc) { os.Exit(exitError) })
	defer stop()

	rep, err := voidOnce(ctx, cfg, log)
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.Is(err, reconcile.ErrNoRun):
			err = fmt.Errorf("no run %d is saved", cfg.RunID)
		case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703"):
			err = fmt.Errorf("%w (is the database migrated? run: api migrate)", err)
		}
		return fail(stderr, "reconcile void", err)
	}
	log.Debug().Int64("run_id", rep.RunID).Str("category", rep.Category).Bool("dry_run", rep.DryRun).
		Interface("counts", rep.Counts).Msg("void done")
	if err := writeVoidReport(cfg, rep, stdout); err != nil {
		return fail(stderr, "reconcile void", fmt.Errorf("the voids are recorded, but writing their report failed: %w", err))
	}
	return rep.ExitCode()
}

func voidOnce(ctx context.Context, cfg VoidConfig, log zerolog.Logger) (*reconcile.VoidReport, error) {
	pool, err := cfg.openPool(ctx)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	// An insert-only River client: the workers run the jobs.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: worker.NewRiverLogger(log)})
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
	return writeOut(cfg.Out, stdout, byFormat(cfg.Format, rep.WriteText, rep.WriteJSON, rep.WriteCSV))
}
