// Package cli holds what every binary's run function shares: reading typed
// configuration from the environment (so that nothing below run calls
// os.Getenv), the logger, flag parsing and usage texts (flags.go), signal
// handling with a second-signal exit, and for the commands under tools/ a
// writer several goroutines share and URLs with their password hidden
// (writer.go).
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/labelkit/labels/postgres"
)

// Env reads typed values from a getenv function and remembers the first bad one.
type Env struct {
	Getenv func(string) string
	Err    error
	// defaults, when set, is told each variable read with its default
	// (see [RecordDefaults]).
	defaults func(name string, def any)
}

// NewEnv returns an Env reading getenv that tells the function ctx carries
// from [RecordDefaults], if any, each variable's default as it reads it.
func NewEnv(ctx context.Context, getenv func(string) string) *Env {
	f, _ := ctx.Value(defaultsKey{}).(func(string, any))
	return &Env{Getenv: getenv, defaults: f}
}

type defaultsKey struct{}

// RecordDefaults returns a context whose [NewEnv] Envs call f with every
// variable they read and the default they read it with: how
// internal/testutil/envdoc holds the documents' defaults to the code's.
func RecordDefaults(ctx context.Context, f func(name string, def any)) context.Context {
	return context.WithValue(ctx, defaultsKey{}, f)
}

func (e *Env) record(name string, def any) {
	if e.defaults != nil {
		e.defaults(name, def)
	}
}

func (e *Env) fail(name, val, want string) {
	if e.Err == nil {
		e.Err = fmt.Errorf("%s=%q: %s", name, val, want)
	}
}

// String returns the variable or def when it is unset or empty.
func (e *Env) String(name, def string) string {
	e.record(name, def)
	if v := e.Getenv(name); v != "" {
		return v
	}
	return def
}

// Duration returns a Go duration.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	return parse(e, name, def, time.ParseDuration, "want a duration such as 500ms, 3s or 24h")
}

// Int returns an integer.
func (e *Env) Int(name string, def int) int {
	return parse(e, name, def, strconv.Atoi, "want an integer")
}

// Bool returns true or false (strconv.ParseBool's spellings).
func (e *Env) Bool(name string, def bool) bool {
	return parse(e, name, def, strconv.ParseBool, "want true or false")
}

// parse returns the variable read by conv, or def when it is unset or empty;
// a value conv refuses is remembered in e.Err (the first one, saying want)
// and def returned.
func parse[T any](e *Env, name string, def T, conv func(string) (T, error), want string) T {
	e.record(name, def)
	v := e.Getenv(name)
	if v == "" {
		return def
	}
	x, err := conv(v)
	if err != nil {
		e.fail(name, v, want)
		return def
	}
	return x
}

// DefaultDatabaseURL is DATABASE_URL's default.
const DefaultDatabaseURL = "postgres://localhost:5432/labels?sslmode=disable"

// Defaults of LOG_LEVEL and LOG_FORMAT.
const (
	DefaultLogLevel  = "info"
	DefaultLogFormat = "json"
)

// DatabaseURL returns DATABASE_URL; when it is unset and PGHOST or PGDATABASE
// is set, it returns "" so that pgx reads the PG* variables itself.
func (e *Env) DatabaseURL() string {
	e.record("DATABASE_URL", DefaultDatabaseURL)
	if v := e.Getenv("DATABASE_URL"); v != "" {
		return v
	}
	if e.Getenv("PGHOST") != "" || e.Getenv("PGDATABASE") != "" {
		return ""
	}
	return DefaultDatabaseURL
}

// Logger builds the logger from LOG_LEVEL and LOG_FORMAT.
func Logger(e *Env, w io.Writer, service string) zerolog.Logger {
	level, err := zerolog.ParseLevel(strings.ToLower(e.String("LOG_LEVEL", DefaultLogLevel)))
	if err != nil || level == zerolog.NoLevel {
		e.fail("LOG_LEVEL", e.Getenv("LOG_LEVEL"), "want debug, info, warn or error")
		level = zerolog.InfoLevel
	}
	switch f := e.String("LOG_FORMAT", DefaultLogFormat); f {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	default:
		e.fail("LOG_FORMAT", f, "want json or console")
	}
	return zerolog.New(w).Level(level).With().Timestamp().Str("service", service).Logger()
}

// Run is a command's body: args are the whole command line (args[0] its
// name); it returns the exit status.
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int

// Exit runs run on the process's command line, environment and standard
// output and exits with its status; signals are run's to handle (Main is the
// variant that handles them).
func Exit(run Run) {
	os.Exit(run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr))
}

// Main runs run on the process's command line, environment and standard
// output and exits with its status. The first SIGINT or SIGTERM cancels
// run's context, so that it stops what it started; a second one exits at
// once with status 130, after one line on stderr named by name.
func Main(name string, run Run) {
	ctx, cancel := SignalContext(context.Background(), func() {
		fmt.Fprintf(os.Stderr, "%s: second signal: exiting at once\n", name)
		os.Exit(130)
	})
	code := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}

// SignalContext returns a context cancelled on the first SIGINT or SIGTERM; a
// second signal calls onSecond (which exits at once).
func SignalContext(parent context.Context, onSecond func()) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-ch:
			cancel()
		case <-parent.Done():
			signal.Stop(ch)
			return
		}
		select {
		case <-ch:
			onSecond()
		case <-parent.Done():
		}
		signal.Stop(ch)
	}()
	return ctx, cancel
}

// ServiceContext is SignalContext for a service: the first SIGINT or SIGTERM
// cancels the returned context, so that the service stops gracefully; a
// second one logs a warning and exits at once with status 1.
func ServiceContext(ctx context.Context, log zerolog.Logger) (context.Context, context.CancelFunc) {
	return SignalContext(ctx, func() {
		log.Warn().Msg("second signal: exiting at once")
		os.Exit(1)
	})
}

// Batch maps an ACCEPT_BATCH or WORKER_BATCH setting, where 0 turns the
// shared statements off, to the Batch of accept.Opts and worker.Config, where
// 0 is their default and a negative value turns them off: the one encoding
// of "no shared commits" below the environment.
func Batch(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// Linger maps an ACCEPT_LINGER or RELAY_LINGER setting, where 0 turns the
// linger off, to accept.Opts.Linger and worker.Config.RelayLinger, where 0
// is their default and a negative value turns it off.
func Linger(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Database is what the environment says about reaching PostgreSQL.
type Database struct {
	URL       string // DATABASE_URL (see [Env.DatabaseURL])
	DirectURL string // DATABASE_DIRECT_URL: a direct connection, for LISTEN and migrations
	Pooled    bool   // DATABASE_POOLED: DATABASE_URL is a pooler in transaction mode
}

// Database reads DATABASE_URL, DATABASE_DIRECT_URL and DATABASE_POOLED,
// whose default is true exactly when DATABASE_DIRECT_URL is set: a separate
// direct URL means DATABASE_URL goes through a pooler.
func (e *Env) Database() Database {
	d := Database{URL: e.DatabaseURL(), DirectURL: e.Getenv("DATABASE_DIRECT_URL")}
	d.Pooled = e.Bool("DATABASE_POOLED", d.DirectURL != "")
	return d
}

// Endpoints ends a binary's start-up checks: it refuses a bad value read
// from the environment (env.Err), then one validate refuses, then a
// DATABASE_URL or DATABASE_DIRECT_URL that does not parse, each with one line
// on stderr prefixed by name; ok false means the binary exits 2. The pools'
// sessions carry the services' settings (postgres.ParseEndpoints).
func Endpoints(name string, env *Env, validate func() error, db Database, stderr io.Writer) (e postgres.Endpoints, ok bool) {
	if env.Err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, env.Err)
		return e, false
	}
	if err := validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return e, false
	}
	e, err := postgres.ParseEndpoints(db.URL, db.DirectURL, db.Pooled)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "DATABASE_DIRECT_URL") {
			err = fmt.Errorf("DATABASE_URL: %w", err)
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return e, false
	}
	return e, true
}

// Dur writes d as the documents do: 24h, 1m, 30s, 500ms (not 24h0m0s), for
// usage texts built from the defaults.
func Dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
