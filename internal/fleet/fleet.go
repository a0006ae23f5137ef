// Package fleet starts the service's real binaries together on this machine:
// the carrier simulator, the API and workers against one database. It is the
// one launcher of the demo, the bench and the fleet task (tools/), of the
// chaos run (e2e/chaos), and of the tests that run binaries (through
// proctest.Fleet): build the binaries ([Binaries]), migrate and add a caller
// ([Fleet.Migrate], [Fleet.AddCaller], any one-shot command with
// [Fleet.Command]), start a process and wait until it is ready
// ([Fleet.Start]), kill one as a crash would ([Fleet.Kill]), stop them in order
// ([Fleet.Stop]), and notice one that exits on its own ([Fleet.Crashes],
// [Fleet.Wait]).
//
// It knows the binaries by name: the variable that sets each one's listen
// address (a free loopback port unless the environment names one), the log
// line that announces it, and GET /healthz there. A worker buys from the
// simulator the fleet started last, and serves no admin listener, unless its
// environment says otherwise. Everything else comes from the caller: an
// environment for every process ([Config.Env]) and one per process
// ([Spec.Env]), and arguments. The processes themselves are internal/proc's:
// each child gets only the variables proc passes on and these, unless
// [Config.InheritEnv].
package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labelkit/labels/internal/proc"
)

// Defaults of [Config].
const (
	DefaultGrace        = time.Minute
	DefaultStartTimeout = time.Minute
)

// listener is what a long-running binary listens on: the variable of its
// address and the message of the log line that announces it.
type listener struct{ env, msg string }

var listeners = map[string]listener{
	"api":     {"API_ADDR", "listening"},
	"carrier": {"CARRIER_ADDR", "listening"},
	"worker":  {"METRICS_ADDR", "metrics listening"},
}

// Config is what every process of a fleet shares.
type Config struct {
	// Bins holds the executables (api, worker, carrier; reconcile for a
	// command that runs it).
	Bins *proc.Binaries
	// Env is every process's environment, name to value; [Spec.Env] and a
	// command's own go on top.
	Env map[string]string
	// InheritEnv passes this process's whole environment on, under Env.
	InheritEnv bool
	// Grace is how long a process has to exit after SIGTERM in [Fleet.Stop]
	// (and when its start failed) before SIGKILL; zero means [DefaultGrace].
	Grace time.Duration
	// StartTimeout bounds each start (listening and healthy) and
	// [Fleet.Migrate] and [Fleet.AddCaller]; zero means [DefaultStartTimeout].
	StartTimeout time.Duration
	// KeepLines bounds the lines kept of each process (proc.Opts.KeepLines).
	KeepLines int
	// OnLine, when set, gets every line each process and command writes,
	// with its name (worker-2, api migrate).
	OnLine func(name string, l proc.Line)
}

// Spec is one long-running process.
type Spec struct {
	// Bin is the binary: api, worker or carrier.
	Bin string
	// Name labels it in logs and errors (worker-2); empty means Bin.
	Name string
	// Args are its command-line arguments.
	Args []string
	// Env goes on top of [Config.Env].
	Env map[string]string
}

// Proc is a process of the fleet.
type Proc struct {
	*proc.Process
	Spec Spec
	// Addr is where it listens (a worker: its metrics listener), host:port.
	Addr string
}

// URL is http://Addr.
func (p *Proc) URL() string { return "http://" + p.Addr }

// Fleet is the processes started so far.
type Fleet struct {
	cfg Config

	mu         sync.Mutex
	procs      []*Proc        // every process started, in order, killed ones too
	ended      map[*Proc]bool // killed or stopped by the fleet
	stopping   bool
	crashes    []string
	crashed    chan struct{} // closed at the first crash
	carrierURL string        // the simulator started last
}

// New returns a fleet that has started nothing yet.
func New(cfg Config) *Fleet {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	return &Fleet{cfg: cfg, ended: map[*Proc]bool{}, crashed: make(chan struct{})}
}

// DatabaseEnv is how a process reaches the database at url: straight when
// pooled is empty; else through the pooler at pooled (transaction mode),
// with url for LISTEN when listen is set, or polling (DATABASE_POOLED) when
// it is not.
func DatabaseEnv(url, pooled string, listen bool) map[string]string {
	switch {
	case pooled == "":
		return map[string]string{"DATABASE_URL": url}
	case listen:
		return map[string]string{"DATABASE_URL": pooled, "DATABASE_DIRECT_URL": url}
	}
	return map[string]string{"DATABASE_URL": pooled, "DATABASE_POOLED": "true", "DATABASE_DIRECT_URL": ""}
}

// environ merges the layers, later ones winning, into KEY=VALUE pairs.
func environ(layers ...map[string]string) []string {
	m := map[string]string{}
	for _, l := range layers {
		maps.Copy(m, l)
	}
	var env []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		env = append(env, k+"="+m[k])
	}
	return env
}

func (f *Fleet) opts(name string, args, env []string) *proc.Opts {
	o := &proc.Opts{Name: name, Args: args, Env: env, InheritEnv: f.cfg.InheritEnv, Grace: f.cfg.Grace, KeepLines: f.cfg.KeepLines}
	if on := f.cfg.OnLine; on != nil {
		o.OnLine = func(l proc.Line) { on(name, l) }
	}
	return o
}

// Command runs bin with args to its end (api migrate, reconcile …), with env
// on top of [Config.Env]; see proc.Run for the result and the error.
func (f *Fleet) Command(ctx context.Context, bin string, env map[string]string, args ...string) (*proc.Result, error) {
	name := strings.TrimSpace(bin + " " + strings.Join(args, " "))
	return proc.Run(ctx, f.cfg.Bins.Path(bin), f.opts(name, args, environ(f.cfg.Env, env)))
}

// Migrate runs api migrate.
func (f *Fleet) Migrate(ctx context.Context, env map[string]string) (*proc.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.StartTimeout)
	defer cancel()
	return f.Command(ctx, "api", env, "migrate")
}

// AddCaller runs api caller add name and returns the token it printed.
func (f *Fleet) AddCaller(ctx context.Context, name string, env map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.StartTimeout)
	defer cancel()
	res, err := f.Command(ctx, "api", env, "caller", "add", name)
	if err != nil {
		return "", err
	}
	if tok := res.LastLine(); tok != "" {
		return tok, nil
	}
	return "", fmt.Errorf("api caller add %s printed no token", name)
}

// Start starts a long-running binary, waits for the log line announcing its
// address and for GET /healthz there to answer 200, and watches it from then
// on. The process lives until the fleet kills or stops it (not when ctx
// ends: ctx bounds the start only). A start that fails kills the process.
func (f *Fleet) Start(ctx context.Context, s Spec) (*Proc, error) {
	l, ok := listeners[s.Bin]
	if !ok {
		return nil, fmt.Errorf("fleet: %q is not a server (api, worker, carrier)", s.Bin)
	}
	name := s.Name
	if name == "" {
		name = s.Bin
	}
	defaults := map[string]string{l.env: "127.0.0.1:0"}
	f.mu.Lock()
	if s.Bin == "worker" {
		defaults["ADMIN_ADDR"] = ""
	}
	// The workers buy from the fleet's carrier, and the API fetches label
	// documents from it.
	if (s.Bin == "worker" || s.Bin == "api") && f.carrierURL != "" {
		defaults["CARRIER_URL"] = f.carrierURL
	}
	f.mu.Unlock()
	p, err := proc.Start(context.WithoutCancel(ctx), f.cfg.Bins.Path(s.Bin), f.opts(name, s.Args, environ(defaults, f.cfg.Env, s.Env)))
	if err != nil {
		return nil, err
	}
	pr := &Proc{Process: p, Spec: s}
	f.mu.Lock()
	f.procs = append(f.procs, pr)
	f.mu.Unlock()
	go f.watch(pr)
	sctx, cancel := context.WithTimeout(ctx, f.cfg.StartTimeout)
	defer cancel()
	addr, err := p.WaitListening(sctx, l.msg)
	if err == nil {
		err = p.WaitHealthy(sctx, addr)
	}
	if err != nil {
		_ = f.Kill(pr)
		return nil, err
	}
	pr.Addr = addr
	if s.Bin == "carrier" {
		f.mu.Lock()
		f.carrierURL = pr.URL()
		f.mu.Unlock()
	}
	return pr, nil
}

// watch records an exit the fleet did not cause.
func (f *Fleet) watch(p *Proc) {
	<-p.Done()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended[p] || f.stopping {
		return
	}
	if len(f.crashes) == 0 {
		close(f.crashed)
	}
	f.crashes = append(f.crashes, fmt.Sprintf("%s (pid %d) exited on its own with status %d; last output:\n%s",
		p.Name(), p.Pid(), p.ExitCode(), p.Tail(10)))
}

// Crashes describes each process that exited without being killed or
// stopped by the fleet, with its last lines.
func (f *Fleet) Crashes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.crashes)
}

// Wait returns nil when ctx ends, or an error as soon as a process exits on
// its own.
func (f *Fleet) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-f.crashed:
		return errors.New(f.Crashes()[0])
	}
}

// Procs returns every process started so far, in order, those that ended
// too.
func (f *Fleet) Procs() []*Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs)
}

// Kill sends p SIGKILL, as a crash would, and waits until it is gone.
func (f *Fleet) Kill(p *Proc) error {
	f.mu.Lock()
	f.ended[p] = true
	f.mu.Unlock()
	return p.Kill()
}

// Stopped is what became of one process [Fleet.Stop] stopped.
type Stopped struct {
	Name string
	// Err is nil when it exited with status 0.
	Err error
}

// Stops is what [Fleet.Stop] did, in order.
type Stops []Stopped

// Err joins the errors of the processes that did not exit with status 0.
func (s Stops) Err() error {
	var errs []error
	for _, st := range s {
		errs = append(errs, st.Err)
	}
	return errors.Join(errs...)
}

// Stop stops procs, or every process still running when none is given: the
// workers together first (each finishes its carrier calls), then the
// others, the last started first. Each gets SIGTERM, and SIGKILL after
// [Config.Grace] or as soon as ctx ends. A process that had already exited
// is passed over.
func (f *Fleet) Stop(ctx context.Context, procs ...*Proc) Stops {
	f.mu.Lock()
	if len(procs) == 0 {
		f.stopping = true
		procs = slices.Clone(f.procs)
	}
	var workers, others []*Proc
	for _, p := range procs {
		if p == nil || f.ended[p] || p.Exited() {
			continue
		}
		f.ended[p] = true
		if p.Spec.Bin == "worker" {
			workers = append(workers, p)
		} else {
			others = append(others, p)
		}
	}
	f.mu.Unlock()
	slices.Reverse(others)
	var (
		mu  sync.Mutex
		out Stops
	)
	stop := func(p *Proc) {
		sctx, cancel := context.WithTimeout(ctx, f.cfg.Grace)
		defer cancel()
		err := p.Process.Stop(sctx)
		mu.Lock()
		out = append(out, Stopped{Name: p.Name(), Err: err})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, p := range workers {
		wg.Go(func() { stop(p) })
	}
	wg.Wait()
	for _, p := range others {
		stop(p)
	}
	return out
}
