package dbtest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/labelkit/labels/internal/devdb"
)

// Private is a PostgreSQL server of one test's own, which the test may stop
// and start again (to show what happens when the database goes away).
type Private struct {
	t    testing.TB
	dir  string
	port int
	// URL is the server's maintenance database.
	URL string
}

// NewPrivate starts a private server in a temporary directory on a free port;
// it is stopped when the test ends. It skips the test when no PostgreSQL
// server binaries are installed.
func NewPrivate(t testing.TB) *Private {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pg")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// The server runs as user postgres, which must reach the directory.
		for d := filepath.Dir(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
				_ = os.Chmod(d, fi.Mode().Perm()|0o011)
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &Private{t: t, dir: dir, port: port}
	p.Start()
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			_ = devdb.Stop(context.Background(), dir)
		}
	})
	return p
}

// Start starts the server (again).
func (p *Private) Start() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, err := devdb.Ensure(ctx, devdb.Options{URL: "postgres://127.0.0.1:1/postgres?sslmode=disable", Dir: p.dir, Port: p.port})
	if err != nil {
		p.t.Fatalf("dbtest: private server: %v", err)
	}
	p.URL = url
}

// Stop stops the server (fast shutdown: sessions are disconnected).
func (p *Private) Stop() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := devdb.Stop(ctx, p.dir); err != nil {
		p.t.Fatalf("dbtest: stopping the private server: %v", err)
	}
}
