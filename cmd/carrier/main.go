// Command carrier runs the carrier simulator: the carrier protocol of
// docs/carrier.md served from memory by package carrier/sim, with the
// misbehaviour the tests and the chaos run ask for.
//
//	carrier [flags]                       serve the simulator on CARRIER_ADDR
//	carrier invoice --day YYYY-MM-DD ...  write a synthetic invoice, no server
//
// Every setting is read from the environment; a flag of the same meaning
// overrides it (see usage). On SIGTERM or SIGINT the simulator stops accepting
// connections, finishes the purchases under way (a purchase waiting out a
// simulated timeout buys at once) and exits 0; a second signal exits at once.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/internal/cli"
)

func main() { cli.Exit(run) }

// Exit statuses, as operations.md names them.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// shutdownTimeout bounds how long the server waits for connections to go idle.
const shutdownTimeout = 10 * time.Second

// Config is everything the simulator is started with.
type Config struct {
	Addr      string
	LogLevel  zerolog.Level
	LogFormat string
	Sim       sim.Options
}

// Validate reports the first bad value.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("listen address %q: %v", c.Addr, err)
	}
	return c.Sim.Validate()
}

// DefaultAddr is CARRIER_ADDR's default: the simulator's listen address
// (carrier.DefaultBaseURL's port).
const DefaultAddr = ":8090"

// setting is one configuration value: its flag, its variable, its default, and
// how it lands in the config.
type setting struct {
	flag, env, def, kind, usage string
	set                         func(v string) error
}

// settings is every setting of one command, in usage order.
type settings []*setting

// value is a flag.Value that only remembers the string it was given, so that
// parsing and its errors happen in one place for flags and variables alike.
type value struct {
	v      string
	set    bool
	isBool bool
}

func (v *value) String() string     { return v.v }
func (v *value) Set(s string) error { v.v, v.set = s, true; return nil }
func (v *value) IsBoolFlag() bool   { return v.isBool }

// parse reads args into the settings: a flag when given, else the variable when
// not empty, else the default. name is the command in messages.
func (ss settings) parse(name string, args []string, env *cli.Env) (help bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	values := make([]*value, len(ss))
	for i, s := range ss {
		values[i] = &value{isBool: s.kind == "bool"}
		fs.Var(values[i], s.flag, s.usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for i, s := range ss {
		v, source := s.def, "--"+s.flag
		if s.env != "" {
			if e := env.String(s.env, s.def); env.Getenv(s.env) != "" {
				v, source = e, s.env
			}
		}
		if values[i].set {
			v, source = values[i].v, "--"+s.flag
		}
		if err := s.set(v); err != nil {
			if !values[i].set && v == s.def {
				return false, err // a required setting left out
			}
			return false, fmt.Errorf("invalid %s %q: %v", source, v, err)
		}
	}
	return false, nil
}

// configure parses args into the settings and checks the result with
// validate. On --help it prints head and the settings' usage (exit 0), on an
// error one line prefixed by name (exit 2); ok is true when the command goes
// on.
func (ss settings) configure(name, head string, args []string, env *cli.Env, validate func() error, stdout, stderr io.Writer) (code int, ok bool) {
	help, err := ss.parse(name, args, env)
	if help {
		fmt.Fprint(stdout, head)
		ss.usage(stdout)
		return exitOK, false
	}
	if err == nil {
		err = validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage, false
	}
	return 0, true
}

// The heads of the commands' usage; the settings' table follows.
const (
	serveUsage = "Usage: carrier [flags]\n       carrier invoice --day YYYY-MM-DD [flags]   (carrier invoice --help)\n\n" +
		"Serves the carrier simulator (carrier.md). Each flag overrides the variable of the same meaning.\n\n"
	invoiceUsage = "Usage: carrier invoice --day YYYY-MM-DD [--lines N] [--out FILE] [--truth FILE] [flags]\n\n" +
		"Writes a synthetic carrier invoice (carrier.md) with the given mix of billing errors, without a server.\n\n"
)

func (ss settings) usage(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, s := range ss {
		arg := " " + strings.ToUpper(s.kind)
		if s.kind == "bool" || s.kind == "" {
			arg = ""
		}
		def := ""
		if s.def != "" {
			def = " (default " + s.def + ")"
		}
		env := s.env
		if env == "" {
			env = "-"
		}
		fmt.Fprintf(tw, "  --%s%s\t%s\t%s%s\n", s.flag, arg, env, s.usage, def)
	}
	_ = tw.Flush()
}

func durationSetting(dst *time.Duration) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return errors.New("not a duration like 500ms or 2s")
		}
		if d < 0 {
			return errors.New("must not be negative")
		}
		*dst = d
		return nil
	}
}

func rateSetting(dst *float64) func(string) error {
	return func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			return errors.New("not a share between 0 and 1")
		}
		*dst = f
		return nil
	}
}

func intSetting(dst *int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return errors.New("not an integer")
		}
		*dst = n
		return nil
	}
}

func stringSetting(dst *string) func(string) error {
	return func(v string) error { *dst = v; return nil }
}

func logSettings(level *zerolog.Level, format *string) settings {
	return settings{
		{flag: "log-level", env: "LOG_LEVEL", def: cli.DefaultLogLevel, kind: "level", usage: "debug, info, warn or error", set: func(v string) error {
			switch v {
			case "debug", "info", "warn", "error":
				l, _ := zerolog.ParseLevel(v)
				*level = l
				return nil
			}
			return errors.New("want debug, info, warn or error")
		}},
		{flag: "log-format", env: "LOG_FORMAT", def: cli.DefaultLogFormat, kind: "format", usage: "json or console", set: func(v string) error {
			if v != "json" && v != "console" {
				return errors.New("want json or console")
			}
			*format = v
			return nil
		}},
	}
}

func billingSettings(o *sim.Options, prefix string) settings {
	// The invoice subcommand names them shorter; the variables are the same.
	names := map[string]string{"dup": "duplicate-line-rate", "amount": "amount-change-rate", "foreign": "foreign-line-rate", "credit": "credit-rate"}
	if prefix == "invoice" {
		names = map[string]string{"dup": "duplicate-rate", "amount": "amount-change-rate", "foreign": "foreign-rate", "credit": "credit-rate"}
	}
	return settings{
		{flag: names["dup"], env: "SIM_DUPLICATE_LINE_RATE", def: "0", kind: "share", usage: "share of labels billed twice", set: rateSetting(&o.DuplicateLineRate)},
		{flag: names["amount"], env: "SIM_AMOUNT_CHANGE_RATE", def: "0", kind: "share", usage: "share of labels billed 150 cents more (a re-weigh)", set: rateSetting(&o.AmountChangeRate)},
		{flag: names["foreign"], env: "SIM_FOREIGN_LINE_RATE", def: "0", kind: "share", usage: "share of labels followed by a line with no label of ours", set: rateSetting(&o.ForeignLineRate)},
		{flag: names["credit"], env: "SIM_CREDIT_RATE", def: "0", kind: "share", usage: "share of labels billed twice, then credited once", set: rateSetting(&o.CreditRate)},
	}
}

func serveSettings(c *Config) settings {
	o := &c.Sim
	ss := settings{
		{flag: "addr", env: "CARRIER_ADDR", def: DefaultAddr, kind: "addr", usage: "listen address; 127.0.0.1:0 picks a free port (logged)", set: stringSetting(&c.Addr)},
		{flag: "token", env: "CARRIER_TOKEN", kind: "token", usage: "bearer token every call must carry (empty: none)", set: stringSetting(&o.Token)},
		{flag: "latency", env: "SIM_LATENCY", def: "0s", kind: "duration", usage: "latency added to every purchase", set: durationSetting(&o.Latency)},
		{flag: "latency-jitter", env: "SIM_LATENCY_JITTER", def: "0s", kind: "duration", usage: "most random extra latency", set: durationSetting(&o.LatencyJitter)},
		{flag: "fail-rate", env: "SIM_FAIL_RATE", def: "0", kind: "share", usage: "share of purchases answered 503 before buying", set: rateSetting(&o.FailRate)},
		{flag: "drop-reply-rate", env: "SIM_DROP_REPLY_RATE", def: "0", kind: "share", usage: "share of purchases whose reply is dropped after buying", set: rateSetting(&o.DropReplyRate)},
		{flag: "timeout-rate", env: "SIM_TIMEOUT_RATE", def: "0", kind: "share", usage: "share of purchases that wait --timeout-delay, then buy anyway", set: rateSetting(&o.TimeoutRate)},
		{flag: "timeout-delay", env: "SIM_TIMEOUT_DELAY", def: cli.Dur(sim.DefaultTimeoutDelay), kind: "duration", usage: "how long a timed-out purchase waits (or until the client leaves)", set: durationSetting(&o.TimeoutDelay)},
		{flag: "void-window", env: "SIM_VOID_WINDOW", def: cli.Dur(sim.DefaultVoidWindow), kind: "duration", usage: "how long after its purchase a label may be voided (later: 409 void_window_closed)", set: func(v string) error {
			if err := durationSetting(&o.VoidWindow)(v); err != nil {
				return err
			}
			if o.VoidWindow == 0 {
				return errors.New("must be positive")
			}
			return nil
		}},
		{flag: "reject-postal-code", env: "SIM_REJECT_POSTAL_CODE", kind: "code", usage: "postal code always rejected with 422 address_invalid", set: stringSetting(&o.RejectPostalCode)},
		{flag: "no-keys", env: "SIM_NO_KEYS", def: "false", kind: "bool", usage: "ignore Idempotency-Key: every call buys again", set: func(v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errors.New("want true or false")
			}
			o.NoKeys = b
			return nil
		}},
		{flag: "seed", env: "SIM_SEED", def: "0", kind: "n", usage: "seed of the random misbehaviour and billing errors", set: intSetting(&o.Seed)},
		{flag: "state-file", env: "SIM_STATE_FILE", kind: "file", usage: "JSON Lines file purchases are kept in across restarts (empty: memory only)", set: stringSetting(&o.StateFile)},
	}
	ss = append(ss, billingSettings(o, "serve")...)
	return append(ss, logSettings(&c.LogLevel, &c.LogFormat)...)
}

func newLogger(w io.Writer, level zerolog.Level, format string) zerolog.Logger {
	if format == "console" {
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Str("service", "carrier").Logger()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if cli.PrintVersion("carrier", args, stdout) {
		return 0
	}
	if len(args) > 1 && args[1] == "invoice" {
		return runInvoice(ctx, args[2:], getenv, stdout, stderr)
	}
	var args1 []string
	if len(args) > 1 {
		args1 = args[1:]
	}

	var cfg Config
	if code, ok := serveSettings(&cfg).configure("carrier", serveUsage, args1, cli.NewEnv(ctx, getenv), cfg.Validate, stdout, stderr); !ok {
		return code
	}
	log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)

	simulator, err := sim.New(&cfg.Sim)
	if err != nil {
		fmt.Fprintf(stderr, "carrier: %v\n", err)
		return exitUsage
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		log.Error().Err(err).Str("addr", cfg.Addr).Msg("cannot listen")
		_ = simulator.Close()
		return exitFailure
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	srv := &http.Server{
		Handler:           logRequests(log, simulator),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          stdlog.New(warnWriter{log}, "", 0),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info().
		Str("addr", ln.Addr().String()).
		Str("url", "http://"+ln.Addr().String()).
		Bool("token", cfg.Sim.Token != "").
		Bool("no_keys", cfg.Sim.NoKeys).
		Str("state_file", cfg.Sim.StateFile).
		Int("purchases", len(simulator.Purchases())).
		Msg("listening")

	code := exitOK
	select {
	case <-ctx.Done():
		// Back to the default handling: a second signal ends the process at once.
		stop()
		log.Info().Msg("shutting down")
	case err := <-serveErr:
		log.Error().Err(err).Msg("server stopped")
		code = exitFailure
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- srv.Shutdown(shutdownCtx) }()
	// Wakes the calls waiting out a latency or a simulated timeout, which
	// Shutdown would otherwise wait for.
	if err := simulator.Close(); err != nil {
		log.Error().Err(err).Msg("closing the state file")
		code = exitFailure
	}
	if err := <-shutdownDone; err != nil {
		log.Warn().Err(err).Msg("connections still open at the deadline; closing them")
		_ = srv.Close()
	}
	log.Info().Msg("stopped")
	return code
}

// warnWriter turns the HTTP server's own complaints into log lines of ours, so
// the output stays one format.
type warnWriter struct{ log zerolog.Logger }

func (w warnWriter) Write(p []byte) (int, error) {
	w.log.Warn().Str("source", "net/http").Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// statusWriter remembers the status for the request log. Unwrap lets the
// simulator still hijack the connection to drop a reply.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func logRequests(log zerolog.Logger, next http.Handler) http.Handler {
	if log.GetLevel() > zerolog.DebugLevel {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			ev := log.Debug().
				Str("method", r.Method).
				Str("path", r.URL.Path).
				Str("idempotency_key", r.Header.Get("Idempotency-Key")).
				Dur("duration_ms", time.Since(start))
			if sw.status == 0 {
				ev.Bool("dropped", true).Msg("request")
			} else {
				ev.Int("status", sw.status).Msg("request")
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// runInvoice writes a synthetic invoice: carrier invoice --day … --lines … --out ….
func runInvoice(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var (
		opts      sim.Options
		day       time.Time
		lines     int64
		out       string
		truthPath string
		level     zerolog.Level
		format    string
	)
	ss := settings{
		{flag: "day", kind: "date", usage: "billing day, YYYY-MM-DD (required)", set: func(v string) error {
			if v == "" {
				return errors.New("--day is required")
			}
			d, err := time.Parse(time.DateOnly, v)
			if err != nil {
				return errors.New("want YYYY-MM-DD")
			}
			day = d
			return nil
		}},
		{flag: "lines", def: "1000", kind: "n", usage: "number of invoice lines", set: func(v string) error {
			if err := intSetting(&lines)(v); err != nil {
				return err
			}
			if lines < 0 {
				return errors.New("must not be negative")
			}
			return nil
		}},
		{flag: "out", def: "-", kind: "file", usage: "where to write the CSV; - is stdout", set: stringSetting(&out)},
		{flag: "truth", kind: "file", usage: "also write what the invoice contains (sim.Truth) as JSON here", set: stringSetting(&truthPath)},
	}
	ss = append(ss, billingSettings(&opts, "invoice")...)
	ss = append(ss, &setting{flag: "seed", env: "SIM_SEED", def: "0", kind: "n", usage: "seed; the same seed, day and mix write the same file", set: intSetting(&opts.Seed)})
	ss = append(ss, logSettings(&level, &format)...)

	validate := func() error { return opts.BillingMix().Validate() }
	if code, ok := ss.configure("carrier invoice", invoiceUsage, args, cli.NewEnv(ctx, getenv), validate, stdout, stderr); !ok {
		return code
	}
	log := newLogger(stderr, level, format)

	w := stdout
	var f *os.File
	if out != "-" {
		var err error
		if f, err = os.Create(out); err != nil {
			log.Error().Err(err).Msg("cannot create the invoice file")
			return exitFailure
		}
		w = f
	}
	truth, err := sim.WriteSyntheticInvoice(w, day, int(lines), opts.BillingMix(), opts.Seed)
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		log.Error().Err(err).Msg("writing the invoice")
		return exitFailure
	}
	if truthPath != "" {
		if err := writeTruth(truthPath, truth); err != nil {
			log.Error().Err(err).Msg("writing the truth")
			return exitFailure
		}
	}
	log.Info().
		Str("invoice_no", truth.InvoiceNo).
		Str("out", out).
		Int("lines", truth.Lines).
		Int("matched", truth.Matched).
		Int("duplicates", truth.Duplicates).
		Int("amount_changes", truth.AmountChanges).
		Int("credits", truth.Credits).
		Int("foreign", truth.Foreign).
		Msg("invoice written")
	return exitOK
}

// writeTruth writes truth as JSON, one label at a time: for a million lines the
// labels alone are hundreds of megabytes, which json.Marshal would hold twice.
func writeTruth(path string, truth sim.Truth) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = func() error {
		labels := truth.Labels
		truth.Labels = nil
		head, err := json.Marshal(truth)
		if err != nil {
			return err
		}
		head, ok := bytes.CutSuffix(head, []byte(`null}`))
		if !ok {
			return errors.New("truth: labels are not the last field")
		}
		w.Write(head)
		w.WriteByte('[')
		for i := range labels {
			if i > 0 {
				w.WriteByte(',')
			}
			b, err := json.Marshal(&labels[i])
			if err != nil {
				return err
			}
			w.Write(b)
		}
		w.WriteString("]}\n")
		return w.Flush()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
