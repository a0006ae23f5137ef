// Package pgbouncer starts PgBouncer (the installed binary, Debian's
// pgbouncer package) in transaction mode on a free loopback port, in front of
// a PostgreSQL server, with a configuration it generates: for `go tool task
// fleet` with POOLER=1, the chaos run, the pooler tests and the capacity
// measurement.
//
// The generated configuration is what docs/operations.md asks of a pooler:
// pool_mode=transaction, no server_reset_query (so that a statement relying
// on a session's state meets another client's session instead of a clean
// one), idle_transaction_timeout in place of the services' own
// idle_in_transaction_session_timeout (a startup setting PgBouncer refuses),
// and trust authentication of the users listed (the local PostgreSQL trusts
// loopback connections too).
package pgbouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labelkit/labels/internal/devdb"
)

// ErrNotInstalled is returned by [Binary] and [Start] when no pgbouncer binary is found.
var ErrNotInstalled = errors.New("no pgbouncer binary: install Debian's pgbouncer package (apt-get install pgbouncer)")

// Binary returns the path of the installed pgbouncer.
func Binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Options configure one PgBouncer.
type Options struct {
	// Server is the PostgreSQL server's URL (its host and port are used).
	Server string
	// Users are the user names clients log in as (default: the user of
	// Server, and root).
	Users []string
	// PoolSize is default_pool_size, the server connections per database and
	// user (default 20).
	PoolSize int
	// MaxClientConn is max_client_conn (default 5000).
	MaxClientConn int
	// Port is the listen port on 127.0.0.1; 0 picks a free one.
	Port int
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	// Addr is host:port clients connect to.
	Addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	log  *tail

	mu      sync.Mutex
	stopped bool
}

// Start writes a configuration into a directory of its own and starts
// pgbouncer, returning once it accepts connections. As root, pgbouncer runs
// as user postgres (or nobody): it refuses to run as root.
func Start(ctx context.Context, o Options) (*Bouncer, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	su, err := url.Parse(o.Server)
	if err != nil {
		return nil, fmt.Errorf("server URL: %w", err)
	}
	host, port := su.Hostname(), su.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 20
	}
	if o.MaxClientConn <= 0 {
		o.MaxClientConn = 5000
	}
	users := o.Users
	if len(users) == 0 {
		users = []string{"root"}
		if n := su.User.Username(); n != "" && n != "root" {
			users = append(users, n)
		}
	}
	if o.Port == 0 {
		if o.Port, err = devdb.FreePort(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "labels-pgbouncer-")
	if err != nil {
		return nil, err
	}
	// Readable by the user pgbouncer switches to.
	_ = os.Chmod(dir, 0o755)
	var userlist strings.Builder
	for _, u := range users {
		fmt.Fprintf(&userlist, "%q \"\"\n", u)
	}
	ini := Config(ConfigOpts{
		Databases: fmt.Sprintf("* = host=%s port=%s", host, port), ListenAddr: "127.0.0.1", Port: o.Port,
		AuthType: "trust", AuthFile: filepath.Join(dir, "userlist.txt"), PoolSize: o.PoolSize, MaxClientConn: o.MaxClientConn,
	})
	for name, body := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": userlist.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		runAs := "nobody"
		if _, err := user.Lookup("postgres"); err == nil {
			runAs = "postgres"
		}
		args = append([]string{"-u", runAs}, args...)
	}
	b := &Bouncer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)), dir: dir, done: make(chan struct{}), log: &tail{}}
	// Not ctx: it runs until Stop.
	b.cmd = exec.Command(bin, args...)
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	for {
		c, err := net.DialTimeout("tcp", b.Addr, time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-b.done:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgbouncer exited at start: %s", b.log.String())
		case <-ctx.Done():
			b.Stop()
			return nil, fmt.Errorf("pgbouncer did not listen on %s: %w; output: %s", b.Addr, ctx.Err(), b.log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// URL is serverURL with its host and port replaced by the bouncer's.
func (b *Bouncer) URL(serverURL string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return serverURL
	}
	u.Host = b.Addr
	return u.String()
}

// Output is what pgbouncer logged last (a few kilobytes).
func (b *Bouncer) Output() string { return b.log.String() }

// Done is closed when pgbouncer has exited.
func (b *Bouncer) Done() <-chan struct{} { return b.done }

// Stop ends pgbouncer (SIGINT: at once, cutting its clients) and removes its directory.
func (b *Bouncer) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.stopped = true
	_ = b.cmd.Process.Signal(os.Interrupt)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	os.RemoveAll(b.dir)
}

// ConfigOpts are the values of a generated pgbouncer.ini.
type ConfigOpts struct {
	Databases     string // the [databases] section's lines
	ListenAddr    string
	Port          int
	AuthType      string // trust, md5, scram-sha-256
	AuthFile      string
	PoolSize      int // default_pool_size
	MaxClientConn int
	// MaxDBConnections caps the server connections per database (0: none).
	MaxDBConnections int
}

// Config renders pgbouncer.ini in transaction mode, as docs/operations.md
// asks of a pooler in front of the services.
func Config(o ConfigOpts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[databases]\n%s\n\n[pgbouncer]\n", o.Databases)
	fmt.Fprintf(&b, "listen_addr = %s\nlisten_port = %d\nunix_socket_dir =\n", o.ListenAddr, o.Port)
	fmt.Fprintf(&b, "auth_type = %s\nauth_file = %s\n", o.AuthType, o.AuthFile)
	b.WriteString(`pool_mode = transaction
; Nothing to reset: the services leave no session state behind.
server_reset_query =
server_reset_query_always = 0
; The services' idle_in_transaction_session_timeout (15 s) is a startup
; setting PgBouncer refuses; this ends a client idle in a transaction instead.
idle_transaction_timeout = 15
ignore_startup_parameters = extra_float_digits
; Back soon after a PostgreSQL restart (the default waits 15 s).
server_login_retry = 1
log_connections = 0
log_disconnections = 0
`)
	fmt.Fprintf(&b, "default_pool_size = %d\nmax_client_conn = %d\n", o.PoolSize, o.MaxClientConn)
	if o.MaxDBConnections > 0 {
		fmt.Fprintf(&b, "max_db_connections = %d\n", o.MaxDBConnections)
	}
	return b.String()
}

// tail keeps the last few kilobytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 16<<10 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-8<<10:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}
