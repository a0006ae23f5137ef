// Command reconcile matches a carrier invoice against our labels and completed
// keys (operations.md, "reconcile"), saves the run and its items, and prints a
// report:
//
//	reconcile (--invoice FILE | --date YYYY-MM-DD) [--format text|json|csv] [--out FILE]
//	          [--grace DURATION] [--stuck-after DURATION]
//	reconcile void --run RUN_ID [--category duplicate_charge|billed_without_label] [--dry-run]
//	          [--format text|json|csv] [--out FILE] [--wait DURATION]
//
// It exits 0 when every item is matched, 1 when any discrepancy is found, and 2
// on an error (a bad flag, an unreadable invoice, an unreachable database or
// carrier), so that a scheduler can alert on 1. `reconcile void` voids the
// extra purchases a saved run found (void.go). See docs/reconcile.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/reconcile"
)

func main() { cli.Exit(run) }

// Exit statuses, as operations.md names them.
const (
	exitMatched     = 0
	exitDiscrepancy = 1
	exitError       = 2
)

// Config is everything a run is started with.
type Config struct {
	Settings
	CarrierURL   string
	CarrierToken string

	InvoicePath string    // --invoice
	Date        time.Time // --date; zero when --invoice is given
	Format      string
	Out         string
	Grace       time.Duration
	StuckAfter  time.Duration
}

// usage is built from the defaults, the ones the configuration is read with.
var usage = fmt.Sprintf(`Usage: reconcile (--invoice FILE | --date YYYY-MM-DD) [flags]
       reconcile void --run RUN_ID [flags]   (reconcile void --help)

Matches a carrier invoice against our labels and completed keys, saves the run
and its items in the database, and prints a report. Exit status: 0 when every
item is matched, 1 when any discrepancy is found, 2 on an error.

Flags:
  --invoice FILE          the carrier's invoice CSV (carrier.md)
  --date DAY              fetch that day's invoice from CARRIER_URL instead: YYYY-MM-DD,
                          or yesterday or today (UTC), as a nightly job runs it
  --format FORMAT         text (a summary), json or csv (every item) (default text)
  --out FILE              write the report to FILE instead of standard output
  --grace DURATION        unbilled labels younger than this are not reported (default %s)
  --stuck-after DURATION  intents pending for longer are stuck (default %s)

Environment:
  DATABASE_URL   PostgreSQL connection string (default %s;
                 when unset and PGHOST or PGDATABASE is set, the PG* variables)
  CARRIER_URL    carrier base URL, for --date (default %s)
  CARRIER_TOKEN  bearer token for the carrier (default none)
  LOG_LEVEL      debug, info, warn or error (default %s)
  LOG_FORMAT     json or console (default %s)

Durations use Go's syntax: 90m, 48h, 0s.
`, cli.Dur(reconcile.DefaultGrace), cli.Dur(reconcile.DefaultStuckAfter), cli.DefaultDatabaseURL,
	carrier.DefaultBaseURL, cli.DefaultLogLevel, cli.DefaultLogFormat)

// parseConfig reads flags and environment; the error is flag.ErrHelp or the
// one line to print.
func parseConfig(ctx context.Context, args []string, getenv func(string) string) (cfg Config, err error) {
	if cfg.Settings, err = parseSettings(ctx, getenv); err != nil {
		return cfg, err
	}
	cfg.CarrierURL = cli.NewEnv(ctx, getenv).String("CARRIER_URL", carrier.DefaultBaseURL)
	cfg.CarrierToken = getenv("CARRIER_TOKEN")

	fs := newFlagSet("reconcile")
	var date, grace, stuck string
	fs.StringVar(&cfg.InvoicePath, "invoice", "", "")
	fs.StringVar(&date, "date", "", "")
	fs.StringVar(&cfg.Format, "format", "text", "")
	fs.StringVar(&cfg.Out, "out", "", "")
	fs.StringVar(&grace, "grace", reconcile.DefaultGrace.String(), "")
	fs.StringVar(&stuck, "stuck-after", reconcile.DefaultStuckAfter.String(), "")
	if err := parseFlags(fs, args); err != nil {
		return cfg, err
	}
	switch {
	case cfg.InvoicePath == "" && date == "":
		return cfg, errors.New("give --invoice FILE or --date YYYY-MM-DD")
	case cfg.InvoicePath != "" && date != "":
		return cfg, errors.New("give --invoice or --date, not both")
	case date != "":
		if cfg.Date, err = parseDate(date, time.Now()); err != nil {
			return cfg, fmt.Errorf("invalid --date %q: want YYYY-MM-DD, today or yesterday", date)
		}
		if u, err := url.Parse(cfg.CarrierURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, fmt.Errorf("invalid CARRIER_URL %q: want http(s)://host[:port]", cfg.CarrierURL)
		}
	}
	if err := checkFormat(cfg.Format); err != nil {
		return cfg, err
	}
	if cfg.Grace, err = duration("--grace", grace); err != nil {
		return cfg, err
	}
	if cfg.StuckAfter, err = duration("--stuck-after", stuck); err != nil {
		return cfg, err
	}
	return cfg, cfg.checkDatabaseURL()
}

// parseDate reads --date: a calendar day, or "today" or "yesterday" (UTC,
// the carrier's billing days) counted from now, so that a nightly job needs
// no shell to compute the day.
func parseDate(v string, now time.Time) (time.Time, error) {
	today := now.UTC().Truncate(24 * time.Hour)
	switch v {
	case "today":
		return today, nil
	case "yesterday":
		return today.AddDate(0, 0, -1), nil
	}
	return time.Parse(time.DateOnly, v)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if cli.PrintVersion("reconcile", args, stdout) {
		return 0
	}
	if len(args) > 0 {
		args = args[1:]
	}
	if len(args) > 0 && args[0] == "void" {
		return runVoid(ctx, args[1:], getenv, stdout, stderr)
	}
	cfg, err := parseConfig(ctx, args, getenv)
	if code, ok := refuse(err, "reconcile", usage, stdout, stderr); !ok {
		return code
	}
	log := cfg.newLogger(stderr)

	// A run is one transaction: the first signal lets it finish (what it saved
	// is then whole), a second one cancels it and nothing is saved.
	ctx, stop := withSignals(ctx, func(context.CancelFunc) {
		log.Warn().Msg("signal received: finishing the run; a second signal cancels it")
	}, func(cancel context.CancelFunc) {
		log.Warn().Msg("second signal: cancelling the run")
		cancel()
	})
	defer stop()

	code, err := reconcileOnce(ctx, cfg, stdout, stderr, log)
	if err != nil {
		return fail(stderr, "reconcile", err)
	}
	return code
}

// fail ends a command that started and could not finish (a missing,
// unreadable or malformed invoice, an unreachable database or carrier): one
// plain line on stderr prefixed by name, as a refused flag's, and exit 2.
// The log carries what happened on the way, not the outcome.
func fail(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "%s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", " "))
	return exitError
}

func reconcileOnce(ctx context.Context, cfg Config, stdout, stderr io.Writer, log zerolog.Logger) (int, error) {
	opts := reconcile.Opts{Grace: cfg.Grace, StuckAfter: cfg.StuckAfter}
	if cfg.InvoicePath != "" {
		f, err := os.Open(cfg.InvoicePath)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		opts.Invoice, opts.Source = f, cfg.InvoicePath
	} else {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		opts.Source = "carrier:" + cfg.Date.Format(time.DateOnly)
		csv, err := fetchInvoice(fctx, cfg, opts.Source, maxInvoiceBytes)
		if err != nil {
			return 0, err
		}
		opts.Invoice = bytes.NewReader(csv)
		opts.Day = cfg.Date
	}
	if isTerminal(stderr) {
		p := &progress{w: stderr}
		opts.ProgressFunc = p.report
		defer p.end()
	}

	pool, err := cfg.openPool(ctx)
	if err != nil {
		return 0, err
	}
	defer pool.Close()

	started := time.Now()
	rep, err := reconcile.Run(ctx, pool, opts)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return 0, fmt.Errorf("%w (is the database migrated? run: api migrate)", err)
		}
		return 0, err
	}
	log.Debug().Int64("run_id", rep.RunID).Strs("period", rep.Period).Int("lines", rep.LinesRead).
		Int("discrepancies", rep.Discrepancies()).Interface("counts", rep.Counts).
		Dur("duration_ms", time.Since(started)).Msg("reconcile run saved")

	if err := writeReport(ctx, cfg, rep, stdout); err != nil {
		return 0, fmt.Errorf("run %d is saved, but writing its report failed: %w", rep.RunID, err)
	}
	return rep.ExitCode(), nil
}

// maxInvoiceBytes bounds the invoice fetched with --date, which is held in
// memory: three times a night of a million lines (about 170 MB).
const maxInvoiceBytes = 512 << 20

// errInvoiceTooLarge is a fetched invoice over its bound.
var errInvoiceTooLarge = errors.New("the invoice is larger than the limit")

// fetchInvoice fetches the invoice of cfg.Date. What is read of it is bounded:
// maxBytes in all, and each line as [reconcile.BoundedInvoice] bounds it, so
// that a line over its bound is refused as soon as it is, with the
// [*reconcile.ParseError] a run would give it.
func fetchInvoice(ctx context.Context, cfg Config, source string, maxBytes int64) ([]byte, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	hc := &http.Client{
		Transport: &boundedInvoice{rt: tr, source: source, maxBytes: maxBytes},
		// A redirect is not part of the protocol (as for carrier's own client).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer tr.CloseIdleConnections()
	client := carrier.NewClient(cfg.CarrierURL, &carrier.ClientOpts{Token: cfg.CarrierToken, HTTPClient: hc})
	csv, err := client.Invoice(ctx, cfg.Date)
	var pe *reconcile.ParseError
	switch {
	case errors.As(err, &pe):
		return nil, pe
	case errors.Is(err, errInvoiceTooLarge):
		return nil, fmt.Errorf("fetching the invoice of %s from %s: %w (%d bytes)",
			cfg.Date.Format(time.DateOnly), cfg.CarrierURL, errInvoiceTooLarge, maxBytes)
	case err != nil:
		return nil, fmt.Errorf("fetching the invoice of %s from %s: %w", cfg.Date.Format(time.DateOnly), cfg.CarrierURL, err)
	}
	return csv, nil
}

// boundedInvoice bounds the body of every 200 answer: maxBytes in all, and
// each line by [reconcile.BoundedInvoice].
type boundedInvoice struct {
	rt       http.RoundTripper
	source   string
	maxBytes int64
}

func (b *boundedInvoice) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.rt.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{reconcile.BoundedInvoice(&capReader{r: resp.Body, left: b.maxBytes}, b.source), resp.Body}
	return resp, nil
}

// capReader reads r up to left bytes, and fails with errInvoiceTooLarge if
// there are more.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			return 0, errInvoiceTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// writeReport writes the report to stdout, or to --out (see [writeAtomically]).
func writeReport(ctx context.Context, cfg Config, rep *reconcile.Report, stdout io.Writer) error {
	write := byFormat(cfg.Format, rep.WriteText, rep.WriteJSON, rep.WriteCSV)
	return writeOut(cfg.Out, stdout, func(w io.Writer) error { return write(ctx, w) })
}

// isTerminal reports whether w is a terminal (a character device), where
// progress is worth showing.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress rewrites one line of the terminal as the run goes.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	last  time.Time
	shown bool
}

func (p *progress) report(pr reconcile.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var line string
	switch pr.Phase {
	case "read":
		if time.Since(p.last) < 200*time.Millisecond {
			return
		}
		line = fmt.Sprintf("reconcile: %s read", linesOf(pr.LinesRead))
	case "match":
		line = fmt.Sprintf("reconcile: %s read; %s", linesOf(pr.LinesRead), pr.Step)
	case "done":
		fmt.Fprintf(p.w, "\r\033[Kreconcile: %s read, %s matched\n", linesOf(pr.LinesRead), thousands(pr.LinesMatched))
		p.shown = false
		return
	default:
		return
	}
	p.last = time.Now()
	p.shown = true
	fmt.Fprintf(p.w, "\r\033[K%s", line)
}

// end closes a progress line left open by a run that failed.
func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprintln(p.w)
	}
}

// linesOf is "1 line", "25,000 lines".
func linesOf(n int) string {
	if n == 1 {
		return "1 line"
	}
	return thousands(n) + " lines"
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Settings is what reconcile and reconcile void both read from the
// environment.
type Settings struct {
	DatabaseURL string
	Pooled      bool // DATABASE_POOLED: DATABASE_URL is a pooler in transaction mode
	LogLevel    zerolog.Level
	LogFormat   string
}

// parseSettings reads DATABASE_URL (or else the PG* variables, as the other
// commands read them), DATABASE_POOLED, LOG_LEVEL and LOG_FORMAT. Whether
// the database URL parses is [Settings.checkDatabaseURL]'s, the last check.
func parseSettings(ctx context.Context, getenv func(string) string) (s Settings, err error) {
	env := cli.NewEnv(ctx, getenv)
	db := env.Database()
	if env.Err != nil {
		return s, env.Err
	}
	s.DatabaseURL, s.Pooled = db.URL, db.Pooled
	switch v := env.String("LOG_LEVEL", cli.DefaultLogLevel); v {
	case "debug", "info", "warn", "error":
		s.LogLevel, _ = zerolog.ParseLevel(v)
	default:
		return s, fmt.Errorf("invalid LOG_LEVEL %q: want debug, info, warn or error", v)
	}
	if s.LogFormat = env.String("LOG_FORMAT", cli.DefaultLogFormat); s.LogFormat != "json" && s.LogFormat != "console" {
		return s, fmt.Errorf("invalid LOG_FORMAT %q: want json or console", s.LogFormat)
	}
	return s, nil
}

func (s Settings) checkDatabaseURL() error {
	if _, err := pgxpool.ParseConfig(s.DatabaseURL); err != nil {
		return fmt.Errorf("invalid DATABASE_URL: %v", redact(err))
	}
	return nil
}

func (s Settings) newLogger(w io.Writer) zerolog.Logger {
	if s.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(s.LogLevel).With().Timestamp().Str("service", "reconcile").Logger()
}

// openPool opens a pool of two connections, which give up connecting after
// 10s unless the URL says otherwise.
func (s Settings) openPool(ctx context.Context) (*pgxpool.Pool, error) {
	db, err := postgres.ParseEndpoints(s.DatabaseURL, "", s.Pooled)
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
	// A schema behind this binary: one error naming `api migrate`, before
	// any work.
	if err := migrations.Check(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// redact keeps a connection string's password out of an error message; pgx
// already masks it, this is belt and braces for the parse errors it wraps.
func redact(err error) string {
	return strings.SplitN(err.Error(), "\n", 2)[0]
}

// newFlagSet returns a flag set that prints nothing: the commands print their
// own usage and errors.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs: the error is flag.ErrHelp for -h or
// --help, and an argument left after the flags is one.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// refuse ends a command that is not to start: on flag.ErrHelp it prints
// usage (exit 0), on another configuration error one line prefixed by name
// (exit 2). ok is true when the command goes on.
func refuse(err error, name, usage string, stdout, stderr io.Writer) (code int, ok bool) {
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return exitMatched, false
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError, false
	}
	return 0, true
}

func checkFormat(format string) error {
	if format != "text" && format != "json" && format != "csv" {
		return fmt.Errorf("invalid --format %q: want text, json or csv", format)
	}
	return nil
}

func duration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("invalid %s %q: want a duration like 48h or 30m", name, v)
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid %s %q: must not be negative", name, v)
	}
	return d, nil
}

// withSignals returns a context that stop cancels: first runs on the first
// SIGINT or SIGTERM, second on the next one, each given the context's cancel,
// until stop is called (so a first signal that cancels still leaves the
// second one its say).
func withSignals(parent context.Context, first, second func(cancel context.CancelFunc)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	stopped := make(chan struct{})
	go func() {
		for _, on := range []func(context.CancelFunc){first, second} {
			select {
			case <-signals:
				on(cancel)
			case <-stopped:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		close(stopped)
		cancel()
	}
}

// byFormat picks the writer --format names (already checked by [checkFormat]).
func byFormat[W any](format string, text, json, csv W) W {
	switch format {
	case "json":
		return json
	case "csv":
		return csv
	}
	return text
}

// writeOut writes a report to stdout, or to the file out names (see
// [writeAtomically]).
func writeOut(out string, stdout io.Writer, write func(io.Writer) error) error {
	if out == "" {
		return write(stdout)
	}
	return writeAtomically(out, write)
}

// writeAtomically writes path through a temporary file beside it, renamed at
// the end, so that a reader never sees half a report.
func writeAtomically(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) //nolint:errcheck // gone after the rename
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
