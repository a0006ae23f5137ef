// Package replicatest runs a PostgreSQL primary and a streaming hot standby
// of its own for one test, from the installed server binaries (initdb,
// pg_ctl, pg_basebackup): the test can kill the primary's postmaster with
// SIGKILL and promote the standby, as a failover manager would, and reach
// whichever is primary through one multi-host URL.
package replicatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/labelkit/labels/internal/devdb"
)

// Server is one server of the pair.
type Server struct {
	Dir  string // the server's directory: data/ and server.log
	Port int
}

// Addr is the server's host:port.
func (s Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the connection string of database db on this server alone.
func (s Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr(), db)
}

func (s Server) data() string { return filepath.Join(s.Dir, "data") }

// Pair is a primary and its hot standby.
type Pair struct {
	t       testing.TB
	bin     string
	Primary Server
	Standby Server
}

// New starts a primary, takes a base backup of it with `pg_basebackup -R`
// (which configures streaming from the primary) and starts that as a hot
// standby; both are stopped when the test ends. It skips the test when no
// PostgreSQL server binaries are installed.
func New(t testing.TB) *Pair {
	t.Helper()
	bin, err := devdb.BinDir()
	if err != nil {
		t.Skip(err)
	}
	// pg_ctl on PATH may be a link into the installation that holds
	// pg_basebackup.
	if real, err := filepath.EvalSymlinks(filepath.Join(bin, "pg_ctl")); err == nil {
		bin = filepath.Dir(real)
	}
	for _, prog := range []string{"pg_basebackup", "pg_ctl", "initdb"} {
		if _, err := os.Stat(filepath.Join(bin, prog)); err != nil {
			t.Skipf("replicatest: no %s in %s", prog, bin)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := t.TempDir()
	p := &Pair{t: t, bin: bin, Primary: newServer(t, root, "primary"), Standby: newServer(t, root, "standby")}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		for _, s := range []Server{p.Standby, p.Primary} {
			if _, err := os.Stat(filepath.Join(s.data(), "postmaster.pid")); err == nil {
				_ = devdb.RunServerCommand(sctx, bin, s.Dir, "pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
			}
		}
	})
	p.run(ctx, p.Primary, "initdb", "-D", p.Primary.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions")
	p.start(ctx, p.Primary)
	p.run(ctx, p.Standby, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Primary.Port), "-U", "postgres",
		"-D", p.Standby.data(), "-R", "-X", "stream", "-c", "fast")
	p.start(ctx, p.Standby)
	p.waitFor(ctx, "the standby to stream from the primary", func(ctx context.Context) (bool, error) {
		var n int
		err := query(ctx, p.Primary.URL("postgres"), `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`, &n)
		return n == 1, err
	})
	return p
}

// newServer makes the directory of a server and picks its port.
func newServer(t testing.TB, root, name string) Server {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := devdb.ServerDir(dir); err != nil {
		t.Fatalf("replicatest: %v", err)
	}
	port, err := devdb.FreePort()
	if err != nil {
		t.Fatalf("replicatest: %v", err)
	}
	return Server{Dir: dir, Port: port}
}

func (p *Pair) run(ctx context.Context, s Server, name string, args ...string) {
	p.t.Helper()
	if err := devdb.RunServerCommand(ctx, p.bin, s.Dir, name, args...); err != nil {
		p.t.Fatalf("replicatest: %v", err)
	}
}

// start starts s listening on 127.0.0.1 only (TCP: no Unix socket).
func (p *Pair) start(ctx context.Context, s Server) {
	p.t.Helper()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k '' -c max_connections=200 -c wal_level=replica -c hot_standby=on", s.Port)
	p.run(ctx, s, "pg_ctl", "-D", s.data(), "-o", opts, "-l", filepath.Join(s.Dir, "server.log"), "-w", "-t", "120", "start")
}

// URL is the multi-host connection string of database db that a service is
// given: both servers, the session going to whichever accepts writes
// (target_session_attrs=read-write).
func (p *Pair) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s,%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		p.Primary.Addr(), p.Standby.Addr(), db)
}

// CreateDatabase creates database name on the primary (the standby gets it
// by replication) and returns its multi-host URL.
func (p *Pair) CreateDatabase(name string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.Primary.URL("postgres"))
	if err != nil {
		p.t.Fatalf("replicatest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		p.t.Fatalf("replicatest: %v", err)
	}
	return p.URL(name)
}

// WaitReplayed waits until the standby has replayed everything the primary
// has written so far: a transaction committed before the call survives a
// failover that follows it.
func (p *Pair) WaitReplayed() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var lsn string
	if err := query(ctx, p.Primary.URL("postgres"), `SELECT pg_current_wal_lsn()::text`, &lsn); err != nil {
		p.t.Fatalf("replicatest: %v", err)
	}
	p.waitFor(ctx, "the standby to replay "+lsn, func(ctx context.Context) (bool, error) {
		var done bool
		err := query(ctx, p.Standby.URL("postgres"), `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, &done, lsn)
		return done, err
	})
}

// KillPrimary kills the primary's postmaster with SIGKILL, as a crashed
// machine would stop it (its backends end when they see it gone), and waits
// until nothing answers on its port.
func (p *Pair) KillPrimary() {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Primary.data(), "postmaster.pid"))
	if err != nil {
		p.t.Fatalf("replicatest: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		p.t.Fatalf("replicatest: postmaster.pid: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		p.t.Fatalf("replicatest: kill -9 %d: %v", pid, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.waitFor(ctx, "the primary's port to close", func(context.Context) (bool, error) {
		return devdb.PortFree(p.Primary.Addr()), nil
	})
}

// Promote promotes the standby (`pg_ctl promote`, waiting until it accepts
// writes), as a failover manager does once the primary is gone.
func (p *Pair) Promote() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.run(ctx, p.Standby, "pg_ctl", "-D", p.Standby.data(), "-w", "-t", "120", "promote")
	p.waitFor(ctx, "the promoted standby to accept writes", func(ctx context.Context) (bool, error) {
		var inRecovery bool
		err := query(ctx, p.Standby.URL("postgres"), `SELECT pg_is_in_recovery()`, &inRecovery)
		return !inRecovery, err
	})
}

// waitFor polls cond until it holds or ctx ends, which fails the test with
// what it waited for and cond's last error.
func (p *Pair) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) {
	p.t.Helper()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("replicatest: waiting for %s: %v", what, errors.Join(ctx.Err(), last))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// query runs sql on a connection of its own and scans its one row into dst.
func query(ctx context.Context, url, sql string, dst any, args ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}
