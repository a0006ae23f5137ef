// Command fleet runs the label service as a small fleet on this machine: the
// carrier simulator, the API and N workers against one database, every
// listener on loopback, until Ctrl-C. It applies the migrations, creates a
// caller and prints the addresses, the token and the River UI's credentials
// (served by the first worker on ADMIN_ADDR).
//
//	go tool task fleet [N=5]   (DATABASE_URL from tools/devdb)
//	go -C tools run ./fleet [flags]
//
// The simulator keeps its labels and voids in a state file
// (.task/fleet/carrier.jsonl by default), as the database keeps ours: a
// restarted fleet goes on numbering carrier labels where it stopped, so that
// an id never names two labels (reconcile would otherwise meet the ids of
// older labels again, docs/reconcile.md).
//
// With --ha (go tool task fleet HA=1) the database is a replicated formation
// instead of DATABASE_URL's server: a pg_auto_failover monitor and two
// PostgreSQL nodes with a synchronous standby (internal/failover), kept in
// .pgdata/ha (--ha-dir) and run again by the next --ha fleet, on
// 127.0.0.1:15440 (the monitor), 15441 and 15442. The processes get both
// nodes in one multi-host DATABASE_URL (target_session_attrs=read-write), and
// the fleet stops the formation after them.
//
// Each process's JSON log lines are copied to stderr prefixed with its name
// (--quiet turns that off). Ctrl-C stops the workers first (they finish their
// carrier calls), then the API, then the simulator; a second Ctrl-C exits at
// once, and the children die with it. Exit status: 0 after a clean stop, 1 when
// a process failed to start or exited on its own, 2 on a bad flag.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/internal/failover"
	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/pgbouncer"
	"github.com/labelkit/labels/internal/proc"
)

func main() { cli.Main("fleet", run) }

const usage = `Usage: fleet [flags]

Runs the carrier simulator, the API and N workers together against the
database of DATABASE_URL, on loopback, until Ctrl-C.

Flags:
`

const usageTail = `
Environment: DATABASE_URL (required unless --ha; go tool task fleet sets it),
ADMIN_PASSWORD (default: a random one, printed), and every other variable of
docs/operations.md, passed on to the processes (CARRIER_TIMEOUT, SIM_*, ...).
The API and the workers get WEBHOOK_ALLOW_UNSEALED=true: a development fleet
signs webhooks with raw secrets when WEBHOOK_SECRET_KEY is not set.
`

// Config is the fleet's configuration, read once in run.
type Config struct {
	DatabaseURL   string
	Workers       int
	APIAddr       string
	CarrierAddr   string
	AdminAddr     string
	AdminPassword string
	BinDir        string
	Quiet         bool
	Pooler        bool
	PoolSize      int
	CarrierState  string
	HA            bool
	HADir         string
}

// DefaultHADir is the --ha formation's directory unless --ha-dir names
// one; it listens on failover.DevMonitorPort and failover.DevNodePorts.
const DefaultHADir = ".pgdata/ha"

// DefaultCarrierState is the simulator's state file when neither
// --carrier-state nor SIM_STATE_FILE names one.
const DefaultCarrierState = ".task/fleet/carrier.jsonl"

// Validate checks what parsing alone cannot.
func (c *Config) Validate() error {
	switch {
	case c.DatabaseURL == "" && !c.HA:
		return errors.New("DATABASE_URL is not set: run `go tool task fleet`, which finds or starts PostgreSQL")
	case c.HA && c.Pooler:
		return errors.New("--ha and --pooler together: PgBouncer would not follow the formation's primary")
	case c.PoolSize < 1 || c.PoolSize > 1000:
		return fmt.Errorf("--pool-size %d: want 1 to 1000", c.PoolSize)
	case c.Workers < 1 || c.Workers > 50:
		return fmt.Errorf("--workers %d: want 1 to 50", c.Workers)
	case !loopback(c.APIAddr) || !loopback(c.CarrierAddr) || (c.AdminAddr != "" && !loopback(c.AdminAddr)):
		return errors.New("--api-addr, --carrier-addr and --admin-addr must be loopback addresses (127.0.0.1:PORT, [::1]:PORT or localhost:PORT)")
	}
	return fleet.CheckBinDir(c.BinDir)
}

func loopback(addr string) bool {
	return strings.HasPrefix(addr, "127.") || strings.HasPrefix(addr, "[::1]:") || strings.HasPrefix(addr, "localhost:")
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg := Config{
		DatabaseURL:   getenv("DATABASE_URL"),
		Workers:       3,
		APIAddr:       "127.0.0.1:8080",
		CarrierAddr:   "127.0.0.1:8090",
		AdminAddr:     "127.0.0.1:9092",
		AdminPassword: getenv("ADMIN_PASSWORD"),
		PoolSize:      20,
		CarrierState:  DefaultCarrierState,
		HADir:         DefaultHADir,
	}
	if v := getenv("SIM_STATE_FILE"); v != "" {
		cfg.CarrierState = v
	}
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker processes")
	fs.StringVar(&cfg.APIAddr, "api-addr", cfg.APIAddr, "the API's listen address")
	fs.StringVar(&cfg.CarrierAddr, "carrier-addr", cfg.CarrierAddr, "the simulator's listen address")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, `the first worker's River UI listener ("" for none)`)
	fs.StringVar(&cfg.BinDir, "bin", cfg.BinDir, "DIR of binaries to use instead of building ./cmd/...")
	fs.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "do not copy the processes' log lines to stderr")
	fs.BoolVar(&cfg.Pooler, "pooler", cfg.Pooler, "put PgBouncer (transaction mode, a generated configuration, a free\n\t"+
		"loopback port) between the processes and PostgreSQL: DATABASE_URL goes through it,\n\t"+
		"DATABASE_DIRECT_URL (LISTEN) straight to PostgreSQL; needs the pgbouncer binary")
	fs.IntVar(&cfg.PoolSize, "pool-size", cfg.PoolSize, "PgBouncer's server connections")
	fs.StringVar(&cfg.CarrierState, "carrier-state", cfg.CarrierState, "FILE: the simulator's state file (SIM_STATE_FILE): its labels and voids,\n\t"+
		"kept across restarts so that its carrier label ids never repeat (default $SIM_STATE_FILE\n\t"+
		"when set, else "+DefaultCarrierState+`; "" keeps them in memory only). Delete it when you drop the database`)
	fs.BoolVar(&cfg.HA, "ha", cfg.HA, "run on a replicated formation instead of DATABASE_URL: a pg_auto_failover monitor\n\t"+
		"and two PostgreSQL nodes, the standby synchronous, kept in --ha-dir (needs pg_autoctl:\n\t"+
		"apt-get install pg-auto-failover-cli postgresql-15-auto-failover)")
	fs.StringVar(&cfg.HADir, "ha-dir", cfg.HADir, "DIR of the --ha formation (created when missing, run again when it holds one)")
	if code, ok := cli.ParseValid(fs, args[1:], cli.Usage(fs, usage, usageTail), cfg.Validate, stdout, stderr); !ok {
		return code
	}
	if cfg.AdminPassword == "" {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		cfg.AdminPassword = hex.EncodeToString(b)
	}

	f := &session{cfg: cfg, stdout: stdout, stderr: &cli.LockedWriter{W: stderr}}
	err := f.start(ctx)
	if err == nil {
		f.summary()
		if err = f.fleet.Wait(ctx); err != nil {
			err = fmt.Errorf("stopping the rest: %w", err)
		} else {
			f.logf("stopping: workers first, then the API, then the carrier")
		}
	}
	stopErr := f.stop()
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(f.stderr, "fleet: interrupted while starting; everything it started is stopped")
		return 130
	case err != nil:
		fmt.Fprintf(f.stderr, "fleet: %v\n", err)
		return 1
	case stopErr != nil:
		fmt.Fprintf(f.stderr, "fleet: while stopping: %v\n", stopErr)
		return 1
	}
	fmt.Fprintln(f.stderr, "fleet: stopped")
	return 0
}

// session is the fleet and what the summary shows of it.
type session struct {
	cfg            Config
	stdout, stderr io.Writer
	bins           *proc.Binaries
	bouncer        *pgbouncer.Bouncer
	formation      *failover.Formation
	fleet          *fleet.Fleet

	api, carrier *fleet.Proc
	workers      []*fleet.Proc
	adminAddr    string
	token        string
}

func (f *session) logf(format string, args ...any) {
	fmt.Fprintf(f.stderr, "fleet: "+format+"\n", args...)
}

func (f *session) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var err error
	if f.bins, err = fleet.Binaries(ctx, f.cfg.BinDir, "", f.logf, "./cmd/api", "./cmd/worker", "./cmd/carrier"); err != nil {
		return err
	}
	if f.cfg.HA {
		// The processes get the labels database on the formation.
		f.formation, f.cfg.DatabaseURL, err = failover.StartWithDatabase(ctx, failover.Options{Root: f.cfg.HADir,
			MonitorPort: failover.DevMonitorPort, Ports: failover.DevNodePorts, Log: f.logf}, "labels")
		if err != nil {
			return fmt.Errorf("--ha: %w", err)
		}
	}
	// db is what the API and the workers get, oneShot what migrate and
	// caller add get.
	db := fleet.DatabaseEnv(f.cfg.DatabaseURL, "", true)
	oneShot := db
	if f.cfg.Pooler {
		b, err := pgbouncer.Start(ctx, pgbouncer.Options{Server: f.cfg.DatabaseURL, PoolSize: f.cfg.PoolSize})
		if err != nil {
			return err
		}
		f.bouncer = b
		f.logf("PgBouncer on %s (transaction mode, %d server connections)", b.Addr, f.cfg.PoolSize)
		db = fleet.DatabaseEnv(f.cfg.DatabaseURL, b.URL(f.cfg.DatabaseURL), true)
		oneShot = fleet.DatabaseEnv(f.cfg.DatabaseURL, b.URL(f.cfg.DatabaseURL), false)
	}
	// The developer's environment is passed on (CARRIER_TIMEOUT, SIM_*,
	// LOG_LEVEL...), the fleet's on top; a development fleet allows raw
	// webhook secrets.
	db["WEBHOOK_ALLOW_UNSEALED"] = "true"
	fc := fleet.Config{Bins: f.bins, Env: db, InheritEnv: true, Grace: 2 * time.Minute, StartTimeout: 5 * time.Minute}
	if !f.cfg.Quiet {
		fc.OnLine = func(name string, l proc.Line) { fmt.Fprintf(f.stderr, "%-9s %s\n", name, l.Text) }
	}
	f.fleet = fleet.New(fc)

	f.logf("applying the migrations")
	if _, err := f.fleet.Migrate(ctx, oneShot); err != nil {
		return err
	}
	if f.cfg.CarrierState != "" {
		if err := os.MkdirAll(filepath.Dir(f.cfg.CarrierState), 0o755); err != nil {
			return fmt.Errorf("the simulator's state file: %w", err)
		}
	}
	if f.carrier, err = f.fleet.Start(ctx, fleet.Spec{Bin: "carrier", Env: map[string]string{
		"CARRIER_ADDR": f.cfg.CarrierAddr, "SIM_STATE_FILE": f.cfg.CarrierState}}); err != nil {
		return err
	}
	if f.api, err = f.fleet.Start(ctx, fleet.Spec{Bin: "api", Env: map[string]string{"API_ADDR": f.cfg.APIAddr}}); err != nil {
		return err
	}
	for i := range f.cfg.Workers {
		var env map[string]string
		if i == 0 && f.cfg.AdminAddr != "" {
			env = map[string]string{"ADMIN_ADDR": f.cfg.AdminAddr, "ADMIN_USER": "admin", "ADMIN_PASSWORD": f.cfg.AdminPassword}
		}
		w, err := f.fleet.Start(ctx, fleet.Spec{Bin: "worker", Name: fmt.Sprintf("worker-%d", i+1), Env: env})
		if err != nil {
			return err
		}
		f.workers = append(f.workers, w)
		if i == 0 && f.cfg.AdminAddr != "" {
			if f.adminAddr, err = w.WaitListening(ctx, "admin listening"); err != nil {
				return err
			}
		}
	}
	f.token, err = f.fleet.AddCaller(ctx, "fleet", oneShot)
	return err
}

func (f *session) summary() {
	w := f.stdout
	fmt.Fprintf(w, "\nThe fleet runs (%d workers). Ctrl-C stops it.\n\n", f.cfg.Workers)
	fmt.Fprintf(w, "  API          %s   (/metrics, /healthz, /readyz)\n", f.api.URL())
	fmt.Fprintf(w, "  carrier      %s   (/sim/stats, /sim/purchases, /sim/config)\n", f.carrier.URL())
	if f.cfg.CarrierState != "" {
		fmt.Fprintf(w, "  carrier state %s   (kept across restarts: carrier label ids never repeat)\n", f.cfg.CarrierState)
	} else {
		fmt.Fprintf(w, "  carrier state in memory only: a restart numbers carrier labels from CL-1 again\n")
	}
	if f.formation != nil {
		f.formation.Summary(context.Background(), w, "labels")
	}
	if f.bouncer != nil {
		fmt.Fprintf(w, "  PgBouncer    %s   (transaction mode, %d server connections; DATABASE_URL of the API and workers)\n", f.bouncer.URL(f.cfg.DatabaseURL), f.cfg.PoolSize)
	}
	for i, p := range f.workers {
		fmt.Fprintf(w, "  worker-%-5d %s/metrics\n", i+1, p.URL())
	}
	if f.adminAddr != "" {
		fmt.Fprintf(w, "  River UI     http://%s/riverui/   user admin, password %s\n", f.adminAddr, f.cfg.AdminPassword)
	}
	fmt.Fprintf(w, "\n  caller token %s\n\n", f.token)
	fmt.Fprintf(w, "Try:\n  curl -s -X POST %s/v1/labels -H 'Authorization: Bearer %s' \\\n"+
		"    -H 'Idempotency-Key: label:918273:1:v1' -H 'Content-Type: application/json' \\\n"+
		"    -d '{\"order_id\":918273,\"parcel_no\":1,\"weight_g\":1450,\"service\":\"ground\",\"ship_to\":{\"name\":\"A. Example\",\"line1\":\"1 Example Street\",\"city\":\"Exampleton\",\"postal_code\":\"10115\",\"country\":\"DE\"}}'\n\n",
		f.api.URL(), f.token)
}

// stop stops the workers together (each finishes its carrier calls), then
// the API, then the carrier simulator, and removes what it built.
func (f *session) stop() error {
	var err error
	if f.fleet != nil {
		err = f.fleet.Stop(context.Background()).Err()
	}
	if f.bouncer != nil {
		f.bouncer.Stop()
	}
	if f.formation != nil {
		f.logf("stopping the formation")
		if ferr := f.formation.Stop(context.Background()); ferr != nil && err == nil {
			err = ferr
		}
	}
	if f.bins != nil {
		_ = f.bins.Remove()
	}
	return err
}
