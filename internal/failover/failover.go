// Package failover runs a replicated PostgreSQL formation under
// pg_auto_failover on this machine, from the installed binaries (Debian's
// pg-auto-failover-cli and postgresql-15-auto-failover): a monitor and two
// nodes, each run by `pg_autoctl run` (as user postgres when this process is
// root), listening on 127.0.0.1 only. The monitor promotes the standby when
// the primary is gone, and a node that comes back rejoins as a standby
// (pg_rewind). With two nodes the standby is synchronous (the manager sets
// synchronous_standby_names on the primary) unless [Options.Async].
//
// It is the core of internal/testutil/failovertest (the tests' formation, in
// a temporary directory on free ports) and of `go tool task fleet HA=1`
// (tools/fleet: a formation kept under .pgdata/ha). [Start] creates the
// formation in an empty root, or runs the one a root holds; [Formation.Stop]
// stops it. The monitor's timings are [TestTimings]: a failover takes seconds
// rather than the production defaults' half minute.
package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/labelkit/labels/internal/devdb"
)

// Options tunes [Start].
type Options struct {
	// Root holds everything: the monitor's and the nodes' data directories,
	// pg_autoctl's configuration and state, the logs. It is created when
	// missing (its parent must exist); a root that holds a formation is run
	// again as it is (its ports and Async are the ones it was created with).
	Root string
	// Async makes the standby asynchronous (replication-quorum false on both
	// nodes): the primary commits without waiting for it.
	Async bool
	// MonitorPort and Ports (the two nodes') are where they listen on
	// 127.0.0.1; 0 means a free port.
	MonitorPort int
	Ports       [2]int
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// TestTimings are the monitor's settings [Start] gives a new formation (in
// the monitor's postgresql.auto.conf), in milliseconds, against the
// production defaults of pg_auto_failover 2.0 in [ProductionTimings]. The
// monitor checks each node every health_check_period; a node that fails a
// check (health_check_timeout, health_check_max_retries retries
// health_check_retry_delay apart) and has not reported for
// node_considered_unhealthy_timeout is unhealthy, and an unhealthy primary
// is failed over. primary_demote_timeout is how long the monitor waits for a
// primary it cannot reach to demote itself before the standby takes over: it
// must stay above the keepers' network_partition_timeout ([KeeperTimeout]),
// after which an isolated primary demotes itself.
var TestTimings = map[string]int{
	"pgautofailover.health_check_period":               1000,
	"pgautofailover.health_check_timeout":              1000,
	"pgautofailover.health_check_max_retries":          1,
	"pgautofailover.health_check_retry_delay":          500,
	"pgautofailover.node_considered_unhealthy_timeout": 2000,
	"pgautofailover.primary_demote_timeout":            3000,
	"pgautofailover.startup_grace_period":              2000,
}

// ProductionTimings are pg_auto_failover 2.0's defaults of [TestTimings].
var ProductionTimings = map[string]int{
	"pgautofailover.health_check_period":               5000,
	"pgautofailover.health_check_timeout":              5000,
	"pgautofailover.health_check_max_retries":          2,
	"pgautofailover.health_check_retry_delay":          2000,
	"pgautofailover.node_considered_unhealthy_timeout": 20000,
	"pgautofailover.primary_demote_timeout":            30000,
	"pgautofailover.startup_grace_period":              10000,
}

// KeeperTimeout is the keepers' network_partition_timeout in seconds (the
// production default is 20): a primary that reaches neither the monitor
// nor its standby for that long demotes itself.
const KeeperTimeout = 2

// serverSettings go into every server's postgresql.auto.conf: pg_autoctl
// sizes shared_buffers and friends after the machine's memory, too much for
// three servers sharing a development machine.
var serverSettings = []string{
	"shared_buffers = '128MB'",
	"effective_cache_size = '1GB'",
	"maintenance_work_mem = '64MB'",
	"work_mem = '4MB'",
	"max_connections = 200",
}

// Node is one PostgreSQL node of the formation.
type Node struct {
	Name string // node1 or node2, its name on the monitor
	Port int
	Dir  string // its PGDATA
}

// Addr is the node's host:port.
func (n Node) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// URL is the connection string of database db on this node alone.
func (n Node) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&connect_timeout=5", n.Addr(), db)
}

// layout is what a root remembers of its formation (formation.json).
type layout struct {
	MonitorPort int    `json:"monitor_port"`
	Ports       [2]int `json:"ports"`
	Async       bool   `json:"async"`
}

// Formation is a running monitor and its two nodes.
type Formation struct {
	root    string
	async   bool
	monitor Node
	nodes   [2]Node
	logf    func(string, ...any)
	bin     string // the PostgreSQL server binaries

	mu    sync.Mutex
	procs map[string]*keeper // by node name, "monitor" too
}

// keeper is one node's (or the monitor's) `pg_autoctl run`: it and the
// processes it starts (postgres among them) form one process group. Like
// the systemd unit pg_auto_failover ships (Restart=always), a pg_autoctl
// that exits on its own is started again, a second later, up to
// [maxRestarts] times: its supervisor gives up when postgres cannot bind its
// port for a moment (a client's ephemeral port may hold it).
type keeper struct {
	cmd     *exec.Cmd // under Formation.mu
	running bool      // under Formation.mu: cmd has not exited
	stopped bool      // under Formation.mu: killed or stopped on purpose
	done    chan struct{}
}

// maxRestarts bounds how often one keeper is started again.
const maxRestarts = 5

// Available reports why a formation cannot run here, or nil: pg_autoctl,
// the PostgreSQL server binaries and the pgautofailover extension must be
// installed (Debian: pg-auto-failover-cli and postgresql-15-auto-failover).
func Available() error {
	if _, err := autoctl(); err != nil {
		return err
	}
	bin, err := serverBin()
	if err != nil {
		return err
	}
	out, err := exec.Command(filepath.Join(bin, "pg_config"), "--sharedir").Output()
	if err != nil {
		return fmt.Errorf("pg_config --sharedir: %w", err)
	}
	control := filepath.Join(strings.TrimSpace(string(out)), "extension", "pgautofailover.control")
	if _, err := os.Stat(control); err != nil {
		return fmt.Errorf("the pgautofailover extension is not installed for %s (apt-get install postgresql-15-auto-failover): %w", bin, err)
	}
	// pg_autoctl starts the servers with Debian's socket directory; root
	// makes it when missing (prepareDirs), another user must be able to
	// write there.
	if os.Geteuid() != 0 {
		if err := syscall.Access(socketDir, 2 /* W_OK */); err != nil {
			return fmt.Errorf("%s is not writable by this user: PostgreSQL could not put its socket there (run as root, or join group postgres): %w", socketDir, err)
		}
	}
	return nil
}

// socketDir is where the servers of a formation put their Unix sockets.
const socketDir = "/var/run/postgresql"

// serverBin is the directory of the PostgreSQL installation whose server
// binaries devdb uses (pg_ctl on PATH may be a link into it).
func serverBin() (string, error) {
	bin, err := devdb.BinDir()
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(bin, "pg_ctl")); err == nil {
		bin = filepath.Dir(real)
	}
	return bin, nil
}

func autoctl() (string, error) {
	p, err := exec.LookPath("pg_autoctl")
	if err != nil {
		return "", errors.New("pg_autoctl is not installed (apt-get install pg-auto-failover-cli postgresql-15-auto-failover)")
	}
	return p, nil
}

// Start runs the formation of o.Root, creating it first when the root holds
// none, and returns once a primary and a healthy standby (synchronous unless
// Async) run. On an error everything it started is stopped.
func Start(ctx context.Context, o Options) (*Formation, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	bin, err := serverBin()
	if err != nil {
		return nil, err
	}
	if o.Root == "" {
		return nil, errors.New("failover: no Options.Root")
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, err
	}
	f := &Formation{root: root, logf: o.Log, bin: bin, procs: map[string]*keeper{}}
	if f.logf == nil {
		f.logf = func(string, ...any) {}
	}
	if err := f.prepareDirs(); err != nil {
		return nil, err
	}
	lay, created, err := f.readLayout(o)
	if err != nil {
		return nil, err
	}
	f.async = lay.Async
	f.monitor = Node{Name: "monitor", Port: lay.MonitorPort, Dir: filepath.Join(root, "monitor")}
	for i := range f.nodes {
		name := fmt.Sprintf("node%d", i+1)
		f.nodes[i] = Node{Name: name, Port: lay.Ports[i], Dir: filepath.Join(root, name)}
	}
	if err := f.start(ctx, created); err != nil {
		_ = f.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return f, nil
}

// prepareDirs makes the root and pg_autoctl's XDG directories, owned by
// the user the servers run as; /var/run/postgresql, where the servers put
// their Unix sockets, too when missing.
func (f *Formation) prepareDirs() error {
	if _, err := os.Stat(f.root); errors.Is(err, os.ErrNotExist) {
		if err := devdb.ServerDir(f.root); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	for _, d := range []string{socketDir, filepath.Join(f.root, "xdg")} {
		if _, err := os.Stat(d); err == nil {
			continue
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("failover: %w", err)
		}
		if err := devdb.ChownServer(d); err != nil {
			return err
		}
	}
	return nil
}

// readLayout returns the root's formation.json, or a new layout (and true)
// written there when the root holds no formation yet.
func (f *Formation) readLayout(o Options) (layout, bool, error) {
	path := filepath.Join(f.root, "formation.json")
	var lay layout
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &lay); err != nil {
			return lay, false, fmt.Errorf("failover: %s: %w", path, err)
		}
		return lay, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return lay, false, err
	}
	lay = layout{MonitorPort: o.MonitorPort, Ports: o.Ports, Async: o.Async}
	for _, p := range []*int{&lay.MonitorPort, &lay.Ports[0], &lay.Ports[1]} {
		if *p == 0 {
			port, err := devdb.FreePort()
			if err != nil {
				return lay, false, err
			}
			*p = port
		} else if !devdb.PortFree(fmt.Sprintf("127.0.0.1:%d", *p)) {
			return lay, false, fmt.Errorf("failover: something listens on 127.0.0.1:%d already", *p)
		}
	}
	b, _ := json.MarshalIndent(lay, "", "  ")
	return lay, true, os.WriteFile(path, b, 0o644)
}

// start creates the monitor and the nodes when created, then runs them and
// waits until the formation is healthy.
func (f *Formation) start(ctx context.Context, create bool) error {
	if create {
		f.logf("failover: creating the monitor on %s", f.monitor.Addr())
		if err := f.run(ctx, "create", "monitor", "--pgdata", f.monitor.Dir, "--pgport", strconv.Itoa(f.monitor.Port),
			"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"); err != nil {
			return err
		}
		if err := f.run(ctx, "config", "set", "--pgdata", f.monitor.Dir, "postgresql.listen_addresses", "127.0.0.1"); err != nil {
			return err
		}
		settings := append([]string{}, serverSettings...)
		for k, v := range TestTimings {
			settings = append(settings, fmt.Sprintf("%s = %d", k, v))
		}
		if err := appendSettings(f.monitor.Dir, settings); err != nil {
			return err
		}
	}
	if err := f.spawn(f.monitor); err != nil {
		return err
	}
	if err := f.waitFor(ctx, "the monitor to answer", func(ctx context.Context) (bool, error) {
		var n int
		err := query(ctx, f.MonitorURL(), `SELECT count(*) FROM pgautofailover.formation`, &n)
		return err == nil, err
	}); err != nil {
		return err
	}
	for i, n := range f.nodes {
		if create {
			if err := f.createNode(ctx, n, i == 0); err != nil {
				return err
			}
		}
		if err := f.spawn(n); err != nil {
			return err
		}
	}
	return f.WaitHealthy(ctx)
}

// createNode registers n with the monitor and initialises its data
// directory: the first node with initdb, the second as a base backup of the
// first (which must run).
func (f *Formation) createNode(ctx context.Context, n Node, first bool) error {
	f.logf("failover: creating %s on %s", n.Name, n.Addr())
	args := []string{"create", "postgres", "--pgdata", n.Dir, "--pgport", strconv.Itoa(n.Port),
		"--pghost", "127.0.0.1", "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", n.Name,
		"--auth", "trust", "--no-ssl", "--monitor", f.MonitorURL()}
	if f.async {
		args = append(args, "--replication-quorum", "false")
	}
	if err := f.run(ctx, args...); err != nil {
		return err
	}
	if err := f.run(ctx, "config", "set", "--pgdata", n.Dir, "timeout.network_partition_timeout", strconv.Itoa(KeeperTimeout)); err != nil {
		return err
	}
	return appendSettings(n.Dir, serverSettings)
}

// settingsMark starts the lines appendSettings adds.
const settingsMark = "# internal/failover:"

// appendSettings adds settings to pgdata's postgresql.auto.conf (read last,
// so they win over pg_autoctl's postgresql-auto-failover.conf) unless a base
// backup brought them already.
func appendSettings(pgdata string, settings []string) error {
	path := filepath.Join(pgdata, "postgresql.auto.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.Contains(string(b), settingsMark) {
		return nil
	}
	text := "\n" + settingsMark + " a formation sharing a development machine\n" + strings.Join(settings, "\n") + "\n"
	file, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := file.WriteString(text); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// command returns pg_autoctl with args, run as the servers' user with the
// formation's environment: its XDG directories (configuration, state, pid
// files) under the root, the server binaries first on PATH.
func (f *Formation) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	path, err := autoctl()
	if err != nil {
		return nil, err
	}
	cmd, err := devdb.ServerCommand(ctx, f.root, path, args...)
	if err != nil {
		return nil, err
	}
	xdg := filepath.Join(f.root, "xdg")
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+xdg, "XDG_DATA_HOME="+xdg, "XDG_RUNTIME_DIR="+xdg,
		"PG_CONFIG="+filepath.Join(f.bin, "pg_config"), "PATH="+f.bin+":"+os.Getenv("PATH"), "PGCONNECT_TIMEOUT=5")
	return cmd, nil
}

// run runs one pg_autoctl command to its end, its output in the error.
func (f *Formation) run(ctx context.Context, args ...string) error {
	cmd, err := f.command(ctx, args...)
	if err != nil {
		return err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_autoctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// output runs one pg_autoctl command and returns its standard output.
func (f *Formation) output(ctx context.Context, args ...string) (string, error) {
	cmd, err := f.command(ctx, args...)
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("pg_autoctl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// spawn starts n's `pg_autoctl run` and keeps it running (see [keeper]).
func (f *Formation) spawn(n Node) error {
	cmd, err := f.startKeeper(n)
	if err != nil {
		return err
	}
	k := &keeper{cmd: cmd, running: true, done: make(chan struct{})}
	f.mu.Lock()
	f.procs[n.Name] = k
	f.mu.Unlock()
	go func() {
		defer close(k.done)
		for restarts := 0; ; restarts++ {
			err := cmd.Wait()
			f.mu.Lock()
			k.running = false
			stopped := k.stopped
			f.mu.Unlock()
			if stopped || restarts == maxRestarts {
				return
			}
			f.logf("failover: %s's pg_autoctl exited (%v; %s.log says why): starting it again", n.Name, err, n.Name)
			time.Sleep(time.Second)
			f.mu.Lock()
			if k.stopped {
				f.mu.Unlock()
				return
			}
			cmd, err = f.startKeeper(n)
			if err != nil {
				f.mu.Unlock()
				f.logf("failover: %v", err)
				return
			}
			k.cmd, k.running = cmd, true
			f.mu.Unlock()
		}
	}()
	return nil
}

// startKeeper starts `pg_autoctl run` for n, its output appended to
// ROOT/NAME.log, in a process group of its own that dies with this process.
func (f *Formation) startKeeper(n Node) (*exec.Cmd, error) {
	cmd, err := f.command(context.Background(), "run", "--pgdata", n.Dir)
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(f.root, n.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = log, log
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	groupOfItsOwn(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pg_autoctl run --pgdata %s: %w", n.Dir, err)
	}
	return cmd, nil
}

// halt marks n's keeper stopped (it is not started again) and sends sig to
// its process group; it returns the keeper, nil when none runs.
func (f *Formation) halt(name string, sig syscall.Signal, group bool) *keeper {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.procs[name]
	if k == nil {
		return nil
	}
	k.stopped = true
	if !k.running {
		return k // gone: its pid may be another process's by now
	}
	pid := k.cmd.Process.Pid
	if group {
		pid = -pid
	}
	_ = syscall.Kill(pid, sig)
	return k
}

// MonitorURL is the monitor's connection string (database pg_auto_failover):
// `pg_autoctl show state --monitor URL` and `pg_autoctl show events
// --monitor URL` read the formation from anywhere on this machine.
func (f *Formation) MonitorURL() string {
	return fmt.Sprintf("postgres://autoctl_node@%s/pg_auto_failover?sslmode=disable", f.monitor.Addr())
}

// Root is the formation's directory: its logs are ROOT/monitor.log,
// ROOT/node1.log and ROOT/node2.log.
func (f *Formation) Root() string { return f.root }

// Async reports whether the standby is asynchronous.
func (f *Formation) Async() bool { return f.async }

// Nodes are the formation's two PostgreSQL nodes.
func (f *Formation) Nodes() []Node { return f.nodes[:] }

// Monitor is the monitor's PostgreSQL server.
func (f *Formation) Monitor() Node { return f.monitor }

// URL is the multi-host connection string of database db that a service is
// given: both nodes, the session going to whichever accepts writes
// (target_session_attrs=read-write).
func (f *Formation) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s,%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		f.nodes[0].Addr(), f.nodes[1].Addr(), db)
}

// Kill kills n's pg_autoctl, its postmaster and every other process of
// its group with SIGKILL, as a machine that is gone stops them (the keeper
// would otherwise restart postgres), and waits until nothing listens on its
// port.
func (f *Formation) Kill(ctx context.Context, n Node) error {
	k := f.halt(n.Name, syscall.SIGKILL, true)
	if k == nil {
		return fmt.Errorf("failover: %s does not run", n.Name)
	}
	killPostmaster(n.Dir)
	select {
	case <-k.done:
	case <-ctx.Done():
		return fmt.Errorf("failover: waiting for %s's pg_autoctl to die: %w", n.Name, ctx.Err())
	}
	return f.waitFor(ctx, n.Name+"'s port to close", func(context.Context) (bool, error) {
		return devdb.PortFree(n.Addr()), nil
	})
}

// killPostmaster kills the postmaster of pgdata with SIGKILL if it runs
// (it is in its keeper's process group: this is for one that is not).
func killPostmaster(pgdata string) {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return
	}
	// A stale file's pid may be another process's by now.
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), pgdata) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// KillPrimary kills the node the monitor holds as primary (see [Formation.Kill])
// and returns it.
func (f *Formation) KillPrimary(ctx context.Context) (Node, error) {
	p, err := f.Primary(ctx)
	if err != nil {
		return Node{}, err
	}
	return p, f.Kill(ctx, p)
}

// Restart runs n's keeper again after [Formation.Kill]: the node rejoins the
// formation as a standby (pg_rewind when its timeline forked), which
// [Formation.WaitHealthy] waits for.
func (f *Formation) Restart(n Node) error {
	f.mu.Lock()
	k := f.procs[n.Name]
	f.mu.Unlock()
	if k != nil {
		select {
		case <-k.done:
		default:
			return fmt.Errorf("failover: %s runs already", n.Name)
		}
	}
	f.logf("failover: restarting %s", n.Name)
	return f.spawn(n)
}

// Stop stops the nodes (standby first) and then the monitor: SIGTERM to
// each pg_autoctl, which stops its postgres, then SIGKILL to whatever of its
// process group is left after 30 seconds or when ctx ends.
func (f *Formation) Stop(ctx context.Context) error {
	order := []string{f.nodes[1].Name, f.nodes[0].Name, "monitor"}
	if p, err := f.Primary(ctx); err == nil && p.Name == f.nodes[1].Name {
		order[0], order[1] = order[1], order[0]
	}
	var errs []error
	for _, name := range order {
		k := f.halt(name, syscall.SIGTERM, false)
		if k == nil {
			continue
		}
		select {
		case <-k.done:
		case <-time.After(30 * time.Second):
			errs = append(errs, fmt.Errorf("failover: %s's pg_autoctl did not stop within 30s: killed", name))
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("failover: stopping %s: %w: killed", name, ctx.Err()))
		}
		f.halt(name, syscall.SIGKILL, true)
		<-k.done
	}
	for _, n := range append(f.Nodes(), f.monitor) {
		killPostmaster(n.Dir)
	}
	return errors.Join(errs...)
}
