package chaos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/testutil/proctest"
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

// fleet is the processes of a run: the simulator, the API and the workers.
type fleet struct {
	cfg  Config
	bins *proctest.Binaries
	db   *database
	say  func(format string, args ...any)

	carrierURL string
	// pooledURL, when set, is PgBouncer's URL of the run's database.
	pooledURL string

	mu       sync.Mutex
	apiAddr  string
	api      *proctest.Process
	carrier  *proctest.Process
	workers  []*proctest.Process
	all      []*proctest.Process        // every process started, killed ones too
	killed   map[*proctest.Process]bool // killed or stopped on purpose
	crashes  []string                   // processes that exited on their own
	logs     map[string]*os.File
	stopping bool
	// secretKey is the run's WEBHOOK_SECRET_KEY: the webhook secrets are
	// stored sealed, and every worker opens them.
	secretKey string
}

func newFleet(cfg Config, bins *proctest.Binaries, db *database, say func(string, ...any)) *fleet {
	return &fleet{cfg: cfg, bins: bins, db: db, say: say, killed: map[*proctest.Process]bool{}, logs: map[string]*os.File{},
		secretKey: base64.StdEncoding.EncodeToString(randomBytes(32))}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return b
}

// env is what every binary of the run gets; proctest passes nothing else of
// this process's environment that could configure them. Through the pooler,
// direct says whether the process also gets the direct URL for LISTEN.
func (f *fleet) env(direct bool, extra ...string) []string {
	db := []string{"DATABASE_URL=" + f.db.URL}
	switch {
	case f.pooledURL != "" && direct:
		db = []string{"DATABASE_URL=" + f.pooledURL, "DATABASE_DIRECT_URL=" + f.db.URL}
	case f.pooledURL != "":
		db = []string{"DATABASE_URL=" + f.pooledURL, "DATABASE_POOLED=true"}
	}
	// The webhook receiver is this process's plain-HTTP loopback server.
	return append(append(db, "LOG_FORMAT=json", "LOG_LEVEL=info",
		"WEBHOOK_ALLOW_INSECURE=true", "WEBHOOK_ALLOW_PRIVATE=true", "WEBHOOK_SECRET_KEY="+f.secretKey), extra...)
}

func (f *fleet) opts(slot string, args []string, env []string) (*proctest.Opts, error) {
	o := &proctest.Opts{Name: slot, Args: args, Env: env, Grace: time.Minute}
	if f.cfg.LogDir != "" {
		f.mu.Lock()
		file := f.logs[slot]
		if file == nil {
			var err error
			file, err = os.OpenFile(filepath.Join(f.cfg.LogDir, slot+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				f.mu.Unlock()
				return nil, err
			}
			f.logs[slot] = file
		}
		f.mu.Unlock()
		fmt.Fprintf(file, "=== %s started at %s\n", slot, time.Now().Format(time.RFC3339Nano))
		o.OnLine = func(l proctest.Line) { fmt.Fprintln(file, l.Text) }
	}
	return o, nil
}

// command runs a one-shot command (api migrate, api caller add) to its end.
func (f *fleet) command(ctx context.Context, name string, args ...string) (*proctest.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	o, err := f.opts(name, args, f.env(false))
	if err != nil {
		return nil, err
	}
	o.Name = name + " " + strings.Join(args, " ")
	return proctest.Run(ctx, f.bins.Path(name), o)
}

// startServer starts a long-running binary in slot, waits for the log line
// announcing its address and for GET /healthz there, and watches it: an exit
// that the run did not cause is recorded as a crash.
func (f *fleet) startServer(ctx context.Context, slot, binary, listening string, env []string) (*proctest.Process, string, error) {
	o, err := f.opts(slot, nil, env)
	if err != nil {
		return nil, "", err
	}
	// Not ctx: the processes are stopped in order at the end, not all at once.
	p, err := proctest.Start(context.Background(), f.bins.Path(binary), o)
	if err != nil {
		return nil, "", err
	}
	f.mu.Lock()
	f.all = append(f.all, p)
	f.mu.Unlock()
	go f.watch(p)
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	addr, err := p.WaitListening(sctx, listening)
	if err == nil {
		err = p.WaitHealthy(sctx, addr)
	}
	if err != nil {
		f.forget(p)
		_ = p.Kill()
		return nil, "", err
	}
	return p, addr, nil
}

func (f *fleet) watch(p *proctest.Process) {
	<-p.Done()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.killed[p] || f.stopping {
		return
	}
	f.crashes = append(f.crashes, fmt.Sprintf("%s (pid %d) exited on its own with status %d; last output:\n%s", p.Name(), p.Pid(), p.ExitCode(), p.Tail(10)))
}

// forget marks p as ended on purpose.
func (f *fleet) forget(p *proctest.Process) {
	f.mu.Lock()
	f.killed[p] = true
	f.mu.Unlock()
}

func (f *fleet) start(ctx context.Context) error {
	p, addr, err := f.startServer(ctx, "carrier", "carrier", "listening",
		append([]string{"CARRIER_ADDR=127.0.0.1:0", "LOG_FORMAT=json", "SIM_SEED=" + fmt.Sprint(f.cfg.Seed)}, simEnv...))
	if err != nil {
		return err
	}
	f.carrier, f.carrierURL = p, "http://"+addr
	if err := f.startAPI(ctx, "127.0.0.1:0"); err != nil {
		return err
	}
	f.workers = make([]*proctest.Process, f.cfg.Workers)
	for i := range f.workers {
		if err := f.startWorker(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (f *fleet) startAPI(ctx context.Context, addr string) error {
	p, got, err := f.startServer(ctx, "api", "api", "listening", f.env(true, "API_ADDR="+addr))
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.api, f.apiAddr = p, got
	f.mu.Unlock()
	return nil
}

func (f *fleet) startWorker(ctx context.Context, i int) error {
	env := f.env(i%2 == 0, append([]string{"CARRIER_URL=" + f.carrierURL, "METRICS_ADDR=127.0.0.1:0", "ADMIN_ADDR="}, workerEnv...)...)
	p, _, err := f.startServer(ctx, fmt.Sprintf("worker-%d", i+1), "worker", "metrics listening", env)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.workers[i] = p
	f.mu.Unlock()
	return nil
}

// apiURL is the API's base URL; it changes only if a restarted API could not
// listen on its old port.
func (f *fleet) apiURL() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return "http://" + f.apiAddr
}

// killWorker sends SIGKILL to worker i and starts a new one in its place.
func (f *fleet) killWorker(ctx context.Context, i int) error {
	f.mu.Lock()
	p := f.workers[i]
	f.killed[p] = true
	f.mu.Unlock()
	if err := p.Kill(); err != nil {
		return err
	}
	return f.startWorker(ctx, i)
}

// killAPI sends SIGKILL to the API and starts a new one on the same address
// (any free one if that is taken meanwhile). Requests in flight get no answer.
func (f *fleet) killAPI(ctx context.Context) error {
	f.mu.Lock()
	p, addr := f.api, f.apiAddr
	f.killed[p] = true
	f.mu.Unlock()
	if err := p.Kill(); err != nil {
		return err
	}
	if err := f.startAPI(ctx, addr); err != nil {
		f.say("the API could not listen on %s again (%v); starting it on a free port", addr, err)
		return f.startAPI(ctx, "127.0.0.1:0")
	}
	return nil
}

// countMessages counts the JSON log lines, of every worker that ran, whose
// message is one of msgs.
func (f *fleet) countMessages(msgs ...string) map[string]int {
	f.mu.Lock()
	all := append([]*proctest.Process(nil), f.all...)
	f.mu.Unlock()
	n := map[string]int{}
	for _, p := range all {
		if !strings.HasPrefix(p.Name(), "worker-") {
			continue
		}
		for _, l := range p.Lines() {
			if !strings.Contains(l.Text, "lease") {
				continue // cheap filter before parsing
			}
			m := l.Msg()
			for _, want := range msgs {
				if m == want {
					n[m]++
				}
			}
		}
	}
	return n
}

// Crashes returns the processes that exited without being killed or stopped.
func (f *fleet) Crashes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.crashes...)
}

// stop stops the workers together (each finishes its carrier calls), then the
// API, then the simulator, each with SIGTERM; it returns the processes that
// did not exit with status 0.
func (f *fleet) stop() []string {
	f.mu.Lock()
	f.stopping = true
	workers := append([]*proctest.Process(nil), f.workers...)
	api, carrier := f.api, f.carrier
	f.mu.Unlock()
	var (
		mu      sync.Mutex
		unclean []string
		wg      sync.WaitGroup
	)
	stop := func(p *proctest.Process) {
		if p == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if p.Exited() {
			return // a crash, already recorded
		}
		if err := p.Stop(ctx); err != nil {
			mu.Lock()
			unclean = append(unclean, err.Error())
			mu.Unlock()
		}
	}
	for _, p := range workers {
		wg.Go(func() { stop(p) })
	}
	wg.Wait()
	stop(api)
	stop(carrier)
	f.mu.Lock()
	for _, file := range f.logs {
		_ = file.Close()
	}
	f.mu.Unlock()
	return unclean
}
