package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/proc"
)

// Order ids: new requests count up from firstOrder; filled keys start at
// replayBase. Both give keys of the seed's length (label:1000001:1:v1).
const (
	firstOrder = 1_000_000
	replayBase = 100_000_000_000
)

// scratchPrefix starts the name of every database the bench creates;
// devdb.DropScratch drops no other.
const scratchPrefix = "labels_bench_"

// callerName is the caller every request is sent as.
const callerName = "bench"

// harness is one run: the server, the database, the processes, the results.
type harness struct {
	cfg  Config
	logf func(format string, args ...any)
	res  *Results

	work    string // temporary directory, removed at the end
	bins    *proc.Binaries
	fleet   *fleet.Fleet // the api, and the worker and simulator of a phase
	pgbench string

	serverURL  string // maintenance database of the server
	privateDir string // the private server's directory; "" with --server
	dbName     string
	dbURL      string
	pool       *pgxpool.Pool // the harness's own: fills, truncates, queries
	token      string

	apiURL string
	cpu    *cpuMeter

	orders atomic.Int64 // the last order id handed out to a new request
	filled int          // keys filled for the replays so far
}

// Run measures everything cfg names and returns the results, also when a
// phase failed (the error names every failed phase).
func Run(ctx context.Context, cfg Config) (*Results, error) {
	began := time.Now()
	h := &harness{cfg: cfg, logf: cfg.LogFunc, cpu: &cpuMeter{}}
	h.orders.Store(firstOrder)
	h.res = &Results{
		Date:      began.UTC().Format("2006-01-02"),
		StartedAt: began.UTC().Truncate(time.Second),
		Command:   cfg.Command,
		Mode:      cfg.Mode,
		Machine:   machine(),
		Setup: Setup{Loads: cfg.Loads, DurationSeconds: cfg.Duration.Seconds(), WarmupSeconds: cfg.Warmup.Seconds(), PacedSeconds: cfg.PacedDuration.Seconds(),
			CeilingScript: ceilingScript, SelectScript: selectScript,
			GOGC: serviceGOGC},
	}
	h.res.Machine.LoadAverageStart = proc.LoadAverage()
	err := h.setup(ctx)
	if err == nil {
		err = h.phases(ctx)
	}
	if cerr := h.teardown(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	h.res.Machine.LoadAverageEnd = proc.LoadAverage()
	h.res.Seconds = round1(time.Since(began).Seconds())
	h.res.Bar = checkBar(h.res)
	return h.res, err
}

// phases runs each phase; a failed phase is reported and the next one runs.
func (h *harness) phases(ctx context.Context) error {
	var errs []error
	step := func(name string, f func(context.Context) error) {
		if ctx.Err() != nil {
			return
		}
		began := time.Now()
		h.logf("phase %s", name)
		if err := f(ctx); err != nil {
			h.res.Errors = append(h.res.Errors, name+": "+err.Error())
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			h.logf("phase %s FAILED after %s: %v", name, time.Since(began).Round(time.Second), err)
			return
		}
		h.logf("phase %s done in %s", name, time.Since(began).Round(time.Second))
	}
	if h.cfg.has(PhaseCeiling) || h.cfg.has(PhaseAccept) || h.cfg.has(PhaseLive) {
		step("ceiling+accept", h.ceilingAndAccept)
	}
	if h.cfg.has(PhaseE2E) {
		step(PhaseE2E, h.endToEnd)
	}
	if h.cfg.has(PhasePaced) {
		step(PhasePaced, h.paced)
	}
	if h.cfg.has(PhaseReplay) {
		step(PhaseReplay, h.replays)
	}
	if h.cfg.has(PhaseStore) {
		step(PhaseStore, h.store)
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// setup builds the binaries, starts or finds the server, creates and
// migrates the database, adds the caller and starts the API.
func (h *harness) setup(ctx context.Context) error {
	var err error
	if h.work, err = os.MkdirTemp("", "labels-bench-"); err != nil {
		return err
	}
	// A private server runs as user postgres when this runs as root: it must
	// be able to enter the directory.
	if err := os.Chmod(h.work, 0o755); err != nil {
		return err
	}
	if h.pgbench, err = devdb.Program("pgbench"); err != nil && (h.cfg.has(PhaseCeiling) || h.cfg.has(PhasePaced)) {
		return err
	}
	h.res.Machine.Pgbench = devdb.ProgramVersion(h.pgbench)
	if h.bins, err = fleet.Binaries(ctx, h.cfg.BinDir, filepath.Join(h.work, "bin"), h.logf, "./cmd/api", "./cmd/worker", "./cmd/carrier"); err != nil {
		return err
	}
	if err := h.server(ctx); err != nil {
		return err
	}
	h.dbName = devdb.ScratchName(scratchPrefix)
	h.logf("database %s", h.dbName)
	if h.dbURL, err = devdb.EnsureDatabase(ctx, h.serverURL, h.dbName); err != nil {
		return fmt.Errorf("creating %s: %w", h.dbName, err)
	}
	// The api logs every request: only the recent lines are kept, so that
	// they do not pile up in the load generator's heap (hundreds of
	// thousands in a full run) and its collector's pauses in the latencies.
	h.fleet = fleet.New(fleet.Config{Bins: h.bins, Env: h.env(), KeepLines: 2000, StartTimeout: 2 * time.Minute})
	if _, err := h.fleet.Migrate(ctx, nil); err != nil {
		return err
	}
	if h.token, err = h.fleet.AddCaller(ctx, callerName, nil); err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(h.dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.RuntimeParams["application_name"] = "bench-harness"
	if h.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	if err := h.settings(ctx); err != nil {
		return err
	}
	if err := h.warmWAL(ctx); err != nil {
		return err
	}
	return h.startAPI(ctx)
}

// warmWAL gives a private server the WAL segments a server that has been
// running has. A new cluster has a handful: until max_wal_size of WAL has
// been written, every 16 MB of it makes the backend whose commit crosses
// into a new segment create and zero-fill that segment first (XLogFileInit:
// a few per cent of the machine's CPU in an end-to-end run, besides the
// wait), where a running server recycles old segments. So this
// writes max_wal_size of segments once, and the checkpoint after recycles
// them for the loads. A --server is not ours to touch.
func (h *harness) warmWAL(ctx context.Context) error {
	if h.privateDir == "" {
		return nil
	}
	began := time.Now()
	var segments int
	err := h.pool.QueryRow(ctx, `
		SELECT (pg_size_bytes(current_setting('max_wal_size')) / pg_size_bytes(current_setting('wal_segment_size')))::int`).Scan(&segments)
	if err != nil {
		return err
	}
	for range segments {
		// A record, so that the switch has something to end: a switch
		// right after another is a no-op.
		if _, err := h.pool.Exec(ctx, `SELECT pg_logical_emit_message(false, 'bench', 'warm'), pg_switch_wal()`); err != nil {
			return err
		}
	}
	if err := h.checkpoint(ctx); err != nil {
		return err
	}
	h.logf("WAL: %d segments written and recycled in %s", segments, time.Since(began).Round(time.Millisecond))
	return nil
}

// server starts the private server, or checks the one given.
func (h *harness) server(ctx context.Context) error {
	if h.cfg.ServerURL != "" {
		u, err := url.Parse(h.cfg.ServerURL)
		if err != nil {
			return fmt.Errorf("--server: %w", err)
		}
		u.Path = "/postgres"
		conn, err := pgx.Connect(ctx, u.String())
		if err != nil {
			return fmt.Errorf("--server %s: %w", cli.Redact(h.cfg.ServerURL), err)
		}
		conn.Close(ctx)
		h.serverURL = u.String()
		h.res.Machine.Server = cli.Redact(h.serverURL) + " (shared: other work may use it; PostgreSQL's CPU is not measured)"
		return nil
	}
	h.privateDir = filepath.Join(h.work, "pg")
	port, err := devdb.FreePort()
	if err != nil {
		return err
	}
	h.logf("starting a private PostgreSQL server on 127.0.0.1:%d", port)
	// Port 1 answers nobody, so devdb starts the private server at once (and
	// says so, which is no news here).
	quiet := func(format string, args ...any) {
		if !strings.HasPrefix(format, "devdb: no server answers") {
			h.logf(format, args...)
		}
	}
	u, err := devdb.Ensure(ctx, devdb.Options{URL: "postgres://127.0.0.1:1/postgres?sslmode=disable", Dir: h.privateDir, Port: port, Log: quiet})
	if err != nil {
		return err
	}
	h.serverURL = u
	h.res.Machine.Server = "private (internal/devdb: initdb, max_connections=300, otherwise defaults)"
	b, err := os.ReadFile(filepath.Join(h.privateDir, "data", "postmaster.pid"))
	if err == nil {
		h.cpu.postmaster, _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	}
	return nil
}

// settings records the server's version and the settings that decide commit speed.
func (h *harness) settings(ctx context.Context) error {
	var names, values []string
	err := h.pool.QueryRow(ctx, `SELECT version(), array_agg(n), array_agg(current_setting(n)) FROM unnest($1::text[]) n`,
		[]string{"shared_buffers", "synchronous_commit", "fsync", "wal_sync_method", "commit_delay", "wal_buffers",
			"max_wal_size", "checkpoint_timeout", "max_connections", "full_page_writes"}).Scan(&h.res.Machine.PostgreSQL, &names, &values)
	for i, n := range names {
		h.res.Machine.Settings[n] = values[i]
	}
	return err
}

// env is what every binary gets (proc passes nothing else of ours): the
// rest of the service's settings are their defaults, as deployed.
func (h *harness) env() map[string]string {
	return map[string]string{"DATABASE_URL": h.dbURL, "LOG_FORMAT": "json", "LOG_LEVEL": "info"}
}

// serviceGOGC is the GOGC of the service's processes (api, worker), as the
// deploy manifests set it: their live heap is a few megabytes, so Go's
// default of 100 would collect every few megabytes of requests; 400 trades
// tens of megabytes for a quarter of those collections.
const serviceGOGC = 400

// start starts a long-running binary and waits until it is ready (see
// fleet.Fleet.Start). The service's processes run with serviceGOGC.
func (h *harness) start(ctx context.Context, bin string, env map[string]string) (*fleet.Proc, error) {
	if bin != "carrier" {
		env["GOGC"] = strconv.Itoa(serviceGOGC)
	}
	return h.fleet.Start(ctx, fleet.Spec{Bin: bin, Env: env})
}

func (h *harness) startAPI(ctx context.Context) error {
	p, err := h.start(ctx, "api", map[string]string{})
	if err != nil {
		return err
	}
	h.apiURL = p.URL()
	h.cpu.api = p.Pid()
	h.logf("api %s (pid %d)", h.apiURL, p.Pid())
	return nil
}

// teardown stops everything it started and drops what it created.
func (h *harness) teardown() error {
	var errs []error
	if h.fleet != nil {
		errs = append(errs, h.fleet.Stop(context.Background()).Err())
	}
	if h.pool != nil {
		h.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if h.dbName != "" && !h.cfg.Keep {
		if err := devdb.DropScratch(ctx, h.serverURL, h.dbName, scratchPrefix); err != nil {
			errs = append(errs, err)
		}
	}
	if h.privateDir != "" && !h.cfg.Keep {
		if err := devdb.Stop(ctx, h.privateDir); err != nil {
			errs = append(errs, err)
		}
	}
	if h.work != "" {
		if h.cfg.Keep {
			h.logf("kept %s (database %s on %s)", h.work, h.dbName, cli.Redact(h.serverURL))
		} else {
			_ = os.RemoveAll(h.work)
		}
	}
	return errors.Join(errs...)
}

// reset empties the tables a load writes, and on a private server writes a
// checkpoint, so that every load starts from the same state.
func (h *harness) reset(ctx context.Context) error {
	if _, err := h.pool.Exec(ctx, `TRUNCATE idempotency_keys, label_intents, label_intent_outbox, labels, idempotency_tombstones, river_job`); err != nil {
		return err
	}
	return h.checkpoint(ctx)
}

// checkpoint writes a checkpoint on a private server, so that no earlier
// write is flushed under the load that follows; a --server is not ours to
// checkpoint.
func (h *harness) checkpoint(ctx context.Context) error {
	if h.privateDir == "" {
		return nil
	}
	_, err := h.pool.Exec(ctx, `CHECKPOINT`)
	return err
}
