// Package dbtest gives each test its own migrated PostgreSQL database.
//
// The first call in a process makes sure a server answers (starting a private
// one through [devdb.Ensure] when none does), builds a template database with
// every migration applied (named by a hash of the migrations, so a changed
// migration builds a new one), and each [New] clones that template, which takes
// a fraction of a second. The database is dropped when the test ends.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/migrations"
)

var (
	once         sync.Once
	adminURL     string
	templateName string
	setupErr     error
)

// New returns a pool on a fresh, migrated database and its connection string.
func New(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	AdminURL(t) // builds the template
	return create(t, templateName)
}

// NewEmpty returns a pool on a fresh database that was never migrated, and
// its connection string: what a binary meets before `api migrate`.
func NewEmpty(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	return create(t, "template0")
}

// create clones template into a database of its own, dropped when the test
// ends.
func create(t testing.TB, template string) (*pgxpool.Pool, string) {
	t.Helper()
	maint := AdminURL(t) // the template is built by then
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := "labels_t_" + randomHex(6)
	admin, err := pgx.Connect(ctx, maint)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, template)); err != nil {
		t.Fatalf("dbtest: cloning template: %v", err)
	}
	url := devdb.WithDatabase(maint, name)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, maint)
		if err != nil {
			return
		}
		defer admin.Close(ctx)
		_, _ = admin.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name))
	})
	return pool, url
}

// AdminURL returns the connection string of the maintenance database of the
// test server, for tests that create databases of their own.
func AdminURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	once.Do(func() { setupErr = setup(ctx) })
	if setupErr != nil {
		t.Fatalf("dbtest: %v", setupErr)
	}
	return adminURL
}

func setup(ctx context.Context) error {
	// The server of DATABASE_URL when set (as `go tool task test` sets it), else
	// 127.0.0.1:5432, else a private one.
	serverURL, err := devdb.Ensure(ctx, devdb.Options{URL: os.Getenv("DATABASE_URL")})
	if err != nil {
		return err
	}
	adminURL = devdb.WithDatabase(serverURL, "postgres")

	all, err := migrations.All()
	if err != nil {
		return err
	}
	h := sha256.New()
	for _, m := range all {
		h.Write([]byte(m.Name))
		h.Write([]byte(m.SQL))
	}
	templateName = "labels_tmpl_" + hex.EncodeToString(h.Sum(nil))[:12]

	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	// Several test binaries run at once: one builds the template, the others wait.
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(918273001)`); err != nil {
		return err
	}
	defer admin.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(918273001)`) //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, templateName).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	building := templateName + "_build"
	_, _ = admin.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, building))
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s`, building)); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, devdb.WithDatabase(adminURL, building))
	if err != nil {
		return err
	}
	_, err = migrations.Apply(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrating the template: %w", err)
	}
	_, err = admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s RENAME TO %s`, building, templateName))
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Querier runs a query of one row: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Scalar returns the one value of the one row that sql returns; it fails t
// when the query fails or returns no row.
func Scalar[T any](t testing.TB, db Querier, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("dbtest: %s: %v", sql, err)
	}
	return v
}

// NewBehind returns a pool on a fresh database migrated as `api migrate`
// leaves it but for our last n migrations (River's all applied), and its
// connection string: what a binary newer than the last `api migrate` meets.
func NewBehind(t testing.TB, n int) (*pgxpool.Pool, string) {
	t.Helper()
	pool, url := NewEmpty(t)
	ctx := context.Background()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("dbtest: river migrations: %v", err)
	}
	all, err := migrations.All()
	if err != nil || n > len(all) {
		t.Fatalf("dbtest: %d of %d migrations behind: %v", n, len(all), err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE schema_migrations (version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	for _, m := range all[:len(all)-n] {
		if _, err := pool.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("dbtest: %s: %v", m.Name, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			t.Fatalf("dbtest: %v", err)
		}
	}
	return pool, url
}
