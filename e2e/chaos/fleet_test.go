package chaos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/proc"
)

// startTimeout bounds one process's start (listening and healthy), and each
// one-shot command.
const startTimeout = time.Minute

// database is the throwaway PostgreSQL server of one run: a fresh data
// directory inside the run's directory, a free loopback port, stopped at the end.
type database struct {
	dir  string // the devdb directory (data/ and the socket inside)
	port int
	// serverURL is the maintenance database; URL the run's database.
	serverURL, URL string
}

// startDatabase starts a server in runDir/pg. As root, devdb runs the server
// as user postgres, which must reach the directory: runDir and everything
// above it are made traversable.
func startDatabase(ctx context.Context, runDir string) (*database, error) {
	db := &database{dir: filepath.Join(runDir, "pg")}
	if err := devdb.ServerDir(db.dir); err != nil {
		return nil, err
	}
	var err error
	if db.port, err = devdb.FreePort(); err != nil {
		return nil, err
	}
	if err := db.start(ctx); err != nil {
		return nil, err
	}
	if db.URL, err = devdb.EnsureDatabase(ctx, db.serverURL, "labels_chaos"); err != nil {
		db.shutdown()
		return nil, fmt.Errorf("creating the run's database: %w", err)
	}
	// Fail fast while the server restarts, instead of hanging on a connect.
	db.URL += "&connect_timeout=3"
	return db, nil
}

// start starts the server (again). The first URL tried answers nowhere, so
// devdb goes straight to the private server of dir and port.
func (db *database) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	u, err := devdb.Ensure(ctx, devdb.Options{URL: "postgres://127.0.0.1:1/postgres?sslmode=disable", Dir: db.dir, Port: db.port})
	if err != nil {
		return fmt.Errorf("PostgreSQL on 127.0.0.1:%d: %w", db.port, err)
	}
	db.serverURL = u
	return nil
}

// stop stops the server (fast shutdown: sessions are cut).
func (db *database) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return devdb.Stop(ctx, db.dir)
}

// shutdown stops the server if it runs.
func (db *database) shutdown() {
	if _, err := os.Stat(filepath.Join(db.dir, "data", "postmaster.pid")); err == nil {
		_ = db.stop(context.Background())
	}
}

// cluster is the processes of a run, started by internal/fleet: the
// simulator, the API and the workers.
type cluster struct {
	cfg Config
	f   *fleet.Fleet
	url string // the run's database
	say func(format string, args ...any)

	carrierURL string
	// pooledURL, when set, is PgBouncer's URL of the run's database.
	pooledURL string

	mu      sync.Mutex
	apis    []*fleet.Proc
	next    int // the API the next request goes to
	workers []*fleet.Proc
	logs    map[string]*os.File // by slot: api, worker-2 (every incarnation)
}

func newCluster(cfg Config, bins *proc.Binaries, url string, say func(string, ...any)) *cluster {
	c := &cluster{cfg: cfg, url: url, say: say, logs: map[string]*os.File{}}
	// What every binary of the run gets; proc passes nothing else of this
	// process's environment that could configure them. The webhook receiver
	// is this process's plain-HTTP loopback server; the webhook secrets are
	// stored sealed, and every worker opens them.
	fc := fleet.Config{Bins: bins, Grace: time.Minute, StartTimeout: startTimeout, Env: map[string]string{
		"LOG_FORMAT": "json", "LOG_LEVEL": "info", "WEBHOOK_ALLOW_INSECURE": "true", "WEBHOOK_ALLOW_PRIVATE": "true",
		"WEBHOOK_SECRET_KEY": base64.StdEncoding.EncodeToString(randomBytes(32)),
	}}
	if cfg.LogDir != "" {
		fc.OnLine = func(name string, l proc.Line) {
			slot, _, _ := strings.Cut(name, " ")
			c.mu.Lock()
			file := c.logs[slot]
			c.mu.Unlock()
			if file != nil {
				fmt.Fprintln(file, l.Text)
			}
		}
	}
	c.f = fleet.New(fc)
	return c
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return b
}

// dbEnv is how a process reaches the database; through the pooler, listen
// says whether it also gets the direct URL for LISTEN.
func (c *cluster) dbEnv(listen bool) map[string]string {
	return fleet.DatabaseEnv(c.url, c.pooledURL, listen)
}

// logStart opens slot's log file (with --log-dir) and marks a start in it.
func (c *cluster) logStart(slot string) error {
	if c.cfg.LogDir == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	file := c.logs[slot]
	if file == nil {
		var err error
		file, err = os.OpenFile(filepath.Join(c.cfg.LogDir, slot+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		c.logs[slot] = file
	}
	fmt.Fprintf(file, "=== %s started at %s\n", slot, time.Now().Format(time.RFC3339Nano))
	return nil
}

// command runs a one-shot command (api migrate, api caller add) to its end.
func (c *cluster) command(ctx context.Context, name string, args ...string) (*proc.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := c.logStart(name); err != nil {
		return nil, err
	}
	return c.f.Command(ctx, name, c.dbEnv(false), args...)
}

// startServer starts a long-running binary in slot and waits until it is
// ready; the fleet records an exit that the run did not cause as a crash.
func (c *cluster) startServer(ctx context.Context, slot, bin string, env map[string]string) (*fleet.Proc, error) {
	if err := c.logStart(slot); err != nil {
		return nil, err
	}
	return c.f.Start(ctx, fleet.Spec{Bin: bin, Name: slot, Env: env})
}

func (c *cluster) start(ctx context.Context) error {
	env := map[string]string{"SIM_SEED": fmt.Sprint(c.cfg.Seed)}
	if c.cfg.HA != nil {
		maps.Copy(env, haSimEnv)
	} else {
		maps.Copy(env, simEnv)
	}
	p, err := c.startServer(ctx, "carrier", "carrier", env)
	if err != nil {
		return err
	}
	c.carrierURL = p.URL()
	c.apis = make([]*fleet.Proc, c.cfg.APIs)
	for i := range c.apis {
		if err := c.startAPI(ctx, i, "127.0.0.1:0"); err != nil {
			return err
		}
	}
	c.workers = make([]*fleet.Proc, c.cfg.Workers)
	for i := range c.workers {
		if err := c.startWorker(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// startAPI starts API i (slot api, api-2, ...) on addr.
func (c *cluster) startAPI(ctx context.Context, i int, addr string) error {
	env := c.dbEnv(true)
	env["API_ADDR"] = addr
	slot := "api"
	if i > 0 {
		slot = fmt.Sprintf("api-%d", i+1)
	}
	p, err := c.startServer(ctx, slot, "api", env)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.apis[i] = p
	c.mu.Unlock()
	return nil
}

func (c *cluster) startWorker(ctx context.Context, i int) error {
	env := c.dbEnv(i%2 == 0)
	maps.Copy(env, workerEnv)
	p, err := c.startServer(ctx, fmt.Sprintf("worker-%d", i+1), "worker", env)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.workers[i] = p
	c.mu.Unlock()
	return nil
}

// apiURL is the base URL of the API the next request goes to, each in turn;
// an API's changes only if a restarted one could not listen on its old port.
func (c *cluster) apiURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = (c.next + 1) % len(c.apis)
	return c.apis[c.next].URL()
}

// killWorker sends SIGKILL to worker i and starts a new one in its place.
func (c *cluster) killWorker(ctx context.Context, i int) error {
	c.mu.Lock()
	p := c.workers[i]
	c.mu.Unlock()
	if err := c.f.Kill(p); err != nil {
		return err
	}
	return c.startWorker(ctx, i)
}

// killAPI sends SIGKILL to the first API and starts a new one on the same
// address (any free one if that is taken meanwhile). Requests in flight get
// no answer.
func (c *cluster) killAPI(ctx context.Context) error {
	c.mu.Lock()
	p := c.apis[0]
	c.mu.Unlock()
	if err := c.f.Kill(p); err != nil {
		return err
	}
	if err := c.startAPI(ctx, 0, p.Addr); err != nil {
		c.say("the API could not listen on %s again (%v); starting it on a free port", p.Addr, err)
		return c.startAPI(ctx, 0, "127.0.0.1:0")
	}
	return nil
}

// countMessages counts the JSON log lines, of every worker that ran, whose
// message is one of msgs.
func (c *cluster) countMessages(msgs ...string) map[string]int {
	n := map[string]int{}
	for _, p := range c.f.Procs() {
		if p.Spec.Bin != "worker" {
			continue
		}
		for _, l := range p.Lines() {
			if !strings.Contains(l.Text, "lease") {
				continue // cheap filter before parsing
			}
			if m := l.Msg(); slices.Contains(msgs, m) {
				n[m]++
			}
		}
	}
	return n
}

// stop stops the workers together (each finishes its carrier calls), then the
// API, then the simulator, each with SIGTERM; it returns the processes that
// did not exit with status 0. A second call stops nothing.
func (c *cluster) stop() []string {
	var unclean []string
	for _, st := range c.f.Stop(context.Background()) {
		if st.Err != nil {
			unclean = append(unclean, st.Err.Error())
		}
	}
	c.mu.Lock()
	for slot, file := range c.logs {
		_ = file.Close()
		delete(c.logs, slot)
	}
	c.mu.Unlock()
	return unclean
}
