// Package migrations holds the project's numbered SQL migrations, embedded in
// every binary, and the runner that applies them together with River's.
//
// Apply is safe to run again (applied versions are recorded in
// schema_migrations) and from several processes at once (each of its
// transactions first takes a transaction-level advisory lock, which
// serialises the runners; the second one finds nothing to do). Holding no
// session state, it runs as well through a pooler in transaction mode.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// advisoryLockKey is an arbitrary constant shared by every runner of this project.
const advisoryLockKey = 7_210_442_918_273

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, name := range entries {
		prefix, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNN_description.sql", name)
		}
		v, err := strconv.Atoi(prefix)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share a version", out[i-1].Name, out[i].Name)
		}
	}
	return out, nil
}

// Result tells what one Apply did.
type Result struct {
	Applied      []string // our migrations applied by this call
	RiverApplied int      // River migrations applied by this call
}

// Apply applies River's migrations and then every one of ours not yet
// applied, each migration in its own transaction under the lock (River's
// cannot share one: a later one uses an enum value an earlier one adds).
func Apply(ctx context.Context, pool *pgxpool.Pool) (Result, error) {
	var res Result
	all, err := All()
	if err != nil {
		return res, err
	}
	lock := func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, advisoryLockKey); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		return nil
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return res, err
	}
	for done := false; !done; {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := lock(tx); err != nil {
				return err
			}
			rr, err := migrator.MigrateTx(ctx, tx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{MaxSteps: 1})
			if err != nil {
				return fmt.Errorf("river migrations: %w", err)
			}
			res.RiverApplied += len(rr.Versions)
			done = len(rr.Versions) == 0
			return nil
		})
		if err != nil {
			return res, err
		}
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lock(tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    int         PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`)
		if err != nil {
			return fmt.Errorf("creating schema_migrations: %w", err)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	for _, m := range all {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := lock(tx); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, m.Version, m.Name)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return nil // applied before
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			res.Applied = append(res.Applied, m.Name)
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return res, nil
}
