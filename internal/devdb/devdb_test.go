package devdb

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The private-server path, for real: nothing answers at the given URL, so
// Ensure starts a server of its own in a temporary directory on a free port;
// EnsureDatabase creates a database once, however often and concurrently it is
// called; Stop stops the server.
func TestEnsureStartsPrivateServer(t *testing.T) {
	if _, err := BinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries (initdb, pg_ctl) on this machine: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dir := privateDir(t)
	port := freePort(t)
	var logMu sync.Mutex
	var logged []string
	opts := Options{
		URL:  "postgres://127.0.0.1:1/postgres?sslmode=disable", // nothing listens on port 1
		Dir:  dir,
		Port: port,
		Log: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			logged = append(logged, fmt.Sprintf(format, args...))
		},
	}
	t.Cleanup(func() {
		// Safety net when the test fails before its own Stop.
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			_ = Stop(context.Background(), dir)
		}
	})

	serverURL, err := Ensure(ctx, opts)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	t.Logf("private server: %s; log: %q", serverURL, logged)
	if want := PrivateURL(port); serverURL != want {
		t.Fatalf("Ensure = %s, want the private server %s", serverURL, want)
	}
	if len(logged) == 0 {
		t.Errorf("Ensure started a server without a progress line")
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("no data directory in %s: %v", dir, err)
	}
	var version string
	queryRow(ctx, t, serverURL, `SHOW server_version`, &version)
	var listenPort string
	queryRow(ctx, t, serverURL, `SHOW port`, &listenPort)
	if listenPort != strconv.Itoa(port) {
		t.Fatalf("server listens on port %s, want %d", listenPort, port)
	}
	t.Logf("PostgreSQL %s on port %s", version, listenPort)

	// A second Ensure finds the running server and starts nothing.
	logged = nil
	again, err := Ensure(ctx, opts)
	if err != nil || again != serverURL {
		t.Fatalf("second Ensure = %q, %v; want %q", again, err, serverURL)
	}
	if len(logged) != 0 {
		t.Errorf("second Ensure logged %q, want nothing", logged)
	}

	// EnsureDatabase: concurrent first calls, then another; one database.
	const name = "devdb_test_db"
	var wg sync.WaitGroup
	urls := make([]string, 4)
	errs := make([]error, 4)
	for i := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			urls[i], errs[i] = EnsureDatabase(ctx, serverURL, name)
		}()
	}
	wg.Wait()
	for i := range urls {
		if errs[i] != nil {
			t.Fatalf("EnsureDatabase #%d: %v", i, errs[i])
		}
	}
	dbURL, err := EnsureDatabase(ctx, serverURL, name)
	if err != nil {
		t.Fatalf("EnsureDatabase again: %v", err)
	}
	for i, u := range urls {
		if u != dbURL {
			t.Fatalf("EnsureDatabase #%d = %s, later %s", i, u, dbURL)
		}
	}
	if u, err := url.Parse(dbURL); err != nil || u.Path != "/"+name || u.Port() != strconv.Itoa(port) {
		t.Fatalf("EnsureDatabase = %s, want database %s on port %d", dbURL, name, port)
	}
	var current string
	queryRow(ctx, t, dbURL, `SELECT current_database()`, &current)
	if current != name {
		t.Fatalf("connected to %s, want %s", current, name)
	}
	var n int
	queryRow(ctx, t, serverURL, fmt.Sprintf(`SELECT count(*) FROM pg_database WHERE datname = '%s'`, name), &n)
	if n != 1 {
		t.Fatalf("%d databases named %s, want 1", n, name)
	}

	if err := Stop(ctx, dir); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := ping(ctx, serverURL); err == nil {
		t.Fatalf("server still answers after Stop")
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
		t.Fatalf("postmaster.pid left after Stop")
	}
}

func queryRow(ctx context.Context, t *testing.T, connURL, sql string, dest any) {
	t.Helper()
	conn, err := pgx.Connect(ctx, connURL)
	if err != nil {
		t.Fatalf("connect %s: %v", connURL, err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// privateDir returns an empty directory for the private server.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pg")
	if err := ServerDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
