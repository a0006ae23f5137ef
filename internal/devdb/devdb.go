// Package devdb makes sure a PostgreSQL server answers for the demo, the tests
// and CI, on this machine or on a fresh one.
//
// It first tries the server the caller names (or 127.0.0.1:5432). When nothing
// answers there, it starts a private server from the installed PostgreSQL
// binaries (initdb, pg_ctl) under the project-local directory .pgdata, listening
// on 127.0.0.1:55432 only, and returns its address. It never uses Docker.
package devdb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PrivatePort is where the private server listens unless [Options.Port] says otherwise.
const PrivatePort = 55432

// PrivateURL is the maintenance URL of a private server listening on port
// (0 means [PrivatePort]).
func PrivateURL(port int) string {
	if port == 0 {
		port = PrivatePort
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// Options tunes [Ensure].
type Options struct {
	// URL of the server to try first; empty means postgres://127.0.0.1:5432/postgres.
	URL string
	// Dir is the private server's data directory; empty means .pgdata at the
	// root of the module (found by walking up to go.mod from the working directory).
	Dir string
	// Port the private server listens on (127.0.0.1 only); 0 means [PrivatePort].
	Port int
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Ensure returns the URL of a server that answers, pointing at its maintenance
// database "postgres". It starts the private server when needed.
func Ensure(ctx context.Context, o Options) (string, error) {
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	first := o.URL
	if first == "" {
		first = "postgres://127.0.0.1:5432/postgres?sslmode=disable"
	}
	var candidates []string
	if strings.Contains(hostList(first), ",") {
		// Several hosts (a primary and its standbys): net/url refuses the
		// list, pgx takes it as it is.
		candidates = append(candidates, WithDatabase(first, "postgres"))
	} else if u, err := url.Parse(first); err == nil {
		u.Path = "/postgres"
		candidates = append(candidates, u.String())
		if u.User == nil {
			// Trust auth may know root but not the OS user, or the other way round.
			for _, name := range []string{"postgres", "root"} {
				c := *u
				c.User = url.User(name)
				candidates = append(candidates, c.String())
			}
		}
	}
	var lastErr error
	for _, c := range candidates {
		if err := ping(ctx, c); err == nil {
			return c, nil
		} else {
			lastErr = err
		}
	}
	port := o.Port
	if port == 0 {
		port = PrivatePort
	}
	private := PrivateURL(port)
	if ping(ctx, private) == nil {
		return private, nil
	}
	logf("devdb: no server answers at %s (%v); starting a private one", first, lastErr)
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = PrivateDir(); err != nil {
			return "", err
		}
	}
	if err := startPrivate(ctx, dir, port, logf); err != nil {
		return "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := ping(ctx, private); err == nil {
			return private, nil
		} else if time.Now().After(deadline) {
			return "", fmt.Errorf("private server in %s did not answer: %w", dir, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// EnsureURL is [Ensure] and [EnsureDatabase] together: it makes sure the
// server of o.URL answers (see [Ensure]) and holds the database o.URL names,
// or name when it names none, and returns that database's URL.
func EnsureURL(ctx context.Context, o Options, name string) (string, error) {
	if o.URL != "" {
		scheme, rest, _ := strings.Cut(o.URL, "://")
		if scheme != "postgres" && scheme != "postgresql" {
			return "", errors.New("the server's URL (DATABASE_URL) must be a postgres:// URL")
		}
		rest, _, _ = strings.Cut(rest, "?")
		if _, db, _ := strings.Cut(rest, "/"); db != "" {
			var err error
			if name, err = url.PathUnescape(db); err != nil {
				return "", fmt.Errorf("the database of DATABASE_URL: %w", err)
			}
		}
	}
	server, err := Ensure(ctx, o)
	if err != nil {
		return "", err
	}
	return EnsureDatabase(ctx, server, name)
}

// EnsureDatabase creates database name on the server of serverURL if it is
// missing, and returns the URL of that database.
func EnsureDatabase(ctx context.Context, serverURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
			var again bool
			// Another process may have created it in the meantime.
			if qerr := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&again); qerr != nil || !again {
				return "", err
			}
		}
	}
	return WithDatabase(serverURL, name), nil
}

// WithDatabase returns the postgres:// URL u with its database replaced by
// name, every host of a multi-host URL and every parameter kept.
func WithDatabase(u, name string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	query := ""
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, query = rest[:i], rest[i:]
	}
	authority, _, _ := strings.Cut(rest, "/")
	return scheme + "://" + authority + "/" + url.PathEscape(name) + query
}

// hostList is the host part of a postgres:// URL (user info left out).
func hostList(u string) string {
	_, rest, _ := strings.Cut(u, "://")
	authority, _, _ := strings.Cut(rest, "/")
	authority, _, _ = strings.Cut(authority, "?")
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	return authority
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

func startPrivate(ctx context.Context, dir string, port int, logf func(string, ...any)) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Several processes (parallel test binaries) may get here at once.
	lock, err := os.OpenFile(filepath.Join(dir, "devdb.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck

	if ping(ctx, PrivateURL(port)) == nil {
		return nil
	}
	data := filepath.Join(dir, "data")
	asUser, err := serverUser()
	if err != nil {
		return err
	}
	run := func(name string, args ...string) error {
		return RunServerCommand(ctx, bin, dir, name, args...)
	}
	if asUser != nil {
		if err := os.Chown(dir, int(asUser.Uid), int(asUser.Gid)); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		logf("devdb: initdb %s", data)
		if err := run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions"); err != nil {
			return err
		}
	}
	logf("devdb: starting PostgreSQL on 127.0.0.1:%d", port)
	// The Unix socket goes into dir, unless its path would pass the kernel's
	// limit (107 bytes): then the server listens on TCP only.
	sockDir := dir
	if len(dir)+len("/.s.PGSQL.65535.lock") > 100 || strings.ContainsAny(dir, " '\"\\") {
		sockDir = "''"
	}
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c max_connections=300 -c fsync=on", port, sockDir)
	return run("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "start")
}

// PrivateDir is the private server's directory unless [Options.Dir] names
// another: .pgdata at the module's root ([ModuleRoot]).
func PrivateDir() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".pgdata"), nil
}

// StopIfRunning stops the private server in dir when one runs there (its
// postmaster.pid exists), and reports whether it did.
func StopIfRunning(ctx context.Context, dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return true, Stop(ctx, dir)
}

// Stop stops the private server in dir if it runs.
func Stop(ctx context.Context, dir string) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}
	return RunServerCommand(ctx, bin, dir, "pg_ctl", "-D", filepath.Join(dir, "data"), "-m", "fast", "-w", "stop")
}

// RunServerCommand runs the PostgreSQL program name of bin (see [BinDir])
// with args in dir, as the user a private server runs as (user postgres
// when this process is root), and returns an error carrying its output when
// it fails.
func RunServerCommand(ctx context.Context, bin, dir, name string, args ...string) error {
	cmd, err := ServerCommand(ctx, dir, filepath.Join(bin, name), args...)
	if err != nil {
		return err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		hint := ""
		if cmd.SysProcAttr != nil && cmd.SysProcAttr.Credential != nil {
			hint = fmt.Sprintf("\n(running as root, the private server runs as user postgres: every directory above %s must be traversable by it)", dir)
		}
		return fmt.Errorf("%s: %w\n%s%s", name, err, out, hint)
	}
	return nil
}

// ServerCommand returns the command that runs program path with args in dir
// as the user a private server runs as (user postgres when this process is
// root), with this process's environment and a UTF-8 locale. The caller may
// add to its environment and SysProcAttr before starting it.
func ServerCommand(ctx context.Context, dir, path string, args ...string) (*exec.Cmd, error) {
	asUser, err := serverUser()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	if asUser != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: asUser}
	}
	// Run from dir: as user postgres the caller's working directory may be unreadable.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "LANG=C.UTF-8")
	return cmd, nil
}

// ChownServer gives path to the user a private server runs as, when that is
// not this process's own (this process is root).
func ChownServer(path string) error {
	asUser, err := serverUser()
	if err != nil || asUser == nil {
		return err
	}
	return os.Chown(path, int(asUser.Uid), int(asUser.Gid))
}

// serverUser is who the private server runs as: nil for this process's own
// user, or user postgres when this process is root (initdb refuses root).
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user to run the private server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// BinDir returns the directory of the installed PostgreSQL server binaries
// (initdb and pg_ctl, from one installation): pg_ctl's on PATH, else the
// newest /usr/lib/postgresql/*/bin that holds initdb.
func BinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// Both must come from the same installation.
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "initdb")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found (initdb, pg_ctl): install the postgresql package")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Program returns the path of a PostgreSQL program such as pgbench or psql:
// on PATH, else beside the server binaries ([BinDir]), where Debian installs
// the client programs too.
func Program(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dir, err := BinDir()
	if _, serr := os.Stat(filepath.Join(dir, name)); err != nil || serr != nil {
		return "", fmt.Errorf("%s not found (on PATH or beside initdb): install postgresql-contrib or the server package", name)
	}
	return filepath.Join(dir, name), nil
}

// ProgramVersion is what the program at path prints for --version, trimmed
// ("" when it cannot run).
func ProgramVersion(path string) string {
	out, _ := exec.Command(path, "--version").Output()
	return strings.TrimSpace(string(out))
}

// Module is the path of the project's main module.
const Module = "github.com/labelkit/labels"

// ModuleRoot returns the nearest directory at or above the working directory
// whose go.mod declares [Module] (tools/go.mod, the tools' own module, is
// passed over): where .pgdata lives, and what the tools build.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(b) == Module {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("devdb: no go.mod of " + Module + " at or above the working directory")
		}
		dir = parent
	}
}

// modulePath is the path a go.mod's module directive declares.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// ServerDir creates dir, an empty directory for a private server (its parent
// must exist). As root the server runs as user postgres, which gets dir and
// must reach it: every directory above it that others cannot traverse
// (t.TempDir makes its directories 0700) is made traversable.
func ServerDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	asUser, err := serverUser()
	if err != nil || asUser == nil {
		return err
	}
	if err := os.Chown(dir, int(asUser.Uid), int(asUser.Gid)); err != nil {
		return err
	}
	for d := filepath.Dir(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("making %s traversable for user postgres: %w", d, err)
			}
		}
	}
	return nil
}

// FreePort returns a loopback TCP port nothing listened on a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PortFree reports whether nothing listens on addr.
func PortFree(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return true
	}
	c.Close()
	return false
}
