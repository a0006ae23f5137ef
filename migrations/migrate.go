// Package migrations holds the project's numbered SQL migrations, embedded in
// every binary, and the runner that applies them together with River's.
//
// Apply is safe to run again (applied versions are recorded in
// schema_migrations) and from several processes at once (each of its
// transactions first takes a transaction-level advisory lock, which
// serialises the runners; the second one finds nothing to do; a runner that
// finds the lock taken tries again 100 ms later rather than wait in a
// statement, whose snapshot a CREATE INDEX CONCURRENTLY would wait for).
// Holding no session state but for the migrations below, it runs as well through a pooler in transaction mode.
//
// A migration whose first line is
//
//	-- migrate: no-transaction
//
// runs outside a transaction, for a statement that cannot run in one, such
// as CREATE INDEX CONCURRENTLY (which builds an index without blocking the
// table's writes). Such a file holds one statement. Apply runs it on one
// connection that holds the same advisory lock at session level
// (pg_advisory_lock) from before it reads schema_migrations until after it
// records the version, which it does only once the statement succeeded. A
// CONCURRENTLY build that failed or was interrupted leaves an invalid index
// behind, which IF NOT EXISTS would take for done: before the statement,
// Apply drops (DROP INDEX CONCURRENTLY) an invalid index of each name the
// file creates with CREATE INDEX CONCURRENTLY, so that running Apply again
// after a failure builds it anew. The session lock needs a session of its
// own: such a migration must run on a direct connection to PostgreSQL, not
// through a pooler in transaction mode, where the lock, the statement and the
// unlock may each land on another server session.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// advisoryLockKey is an arbitrary constant shared by every runner of this project.
const advisoryLockKey = 7_210_442_918_273

// NoTransaction is the first line of a migration that runs outside a
// transaction (see the package's doc).
const NoTransaction = "-- migrate: no-transaction"

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// NoTransaction says the file's first line is [NoTransaction].
	NoTransaction bool
}

// concurrentIndex finds the names of the indexes a statement builds with
// CREATE INDEX CONCURRENTLY.
var concurrentIndex = regexp.MustCompile(`(?i)\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_$]*)`)

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
		first, _, _ := strings.Cut(string(body), "\n")
		out = append(out, Migration{Version: v, Name: name, SQL: string(body),
			NoTransaction: strings.TrimSpace(first) == NoTransaction})
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
// cannot share one: a later one uses an enum value an earlier one adds), or,
// for one marked [NoTransaction], outside a transaction on one connection
// that holds the lock at session level.
func Apply(ctx context.Context, pool *pgxpool.Pool) (Result, error) {
	var res Result
	all, err := All()
	if err != nil {
		return res, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return res, err
	}
	for done := false; !done; {
		err := locked(ctx, pool, func(tx pgx.Tx) error {
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
	err = locked(ctx, pool, func(tx pgx.Tx) error {
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
		if m.NoTransaction {
			applied, err := applyOutsideTransaction(ctx, pool, m)
			if err != nil {
				return res, fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if applied {
				res.Applied = append(res.Applied, m.Name)
			}
			continue
		}
		err := locked(ctx, pool, func(tx pgx.Tx) error {
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

// lockRetry is the pause between two tries of the advisory lock. A runner
// tries the lock (pg_try_advisory_lock) rather than wait in
// pg_advisory_lock: a statement waiting for the lock holds a snapshot, which
// a CREATE INDEX CONCURRENTLY of the lock's holder would wait for, each
// waiting for the other.
const lockRetry = 100 * time.Millisecond

var errLockBusy = errors.New("the migration lock is taken")

// retry calls try until it succeeds or fails, lockRetry apart.
func retry(ctx context.Context, try func() (bool, error)) error {
	for {
		ok, err := try()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockRetry):
		}
	}
}

// locked runs fn in a transaction that first takes the advisory lock
// (pg_try_advisory_xact_lock; while it is taken, the transaction rolls back
// and another tries lockRetry later).
func locked(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	return retry(ctx, func() (bool, error) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var ok bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, advisoryLockKey).Scan(&ok); err != nil {
				return fmt.Errorf("taking the migration lock: %w", err)
			}
			if !ok {
				return errLockBusy
			}
			return fn(tx)
		})
		if errors.Is(err, errLockBusy) {
			return false, nil
		}
		return true, err
	})
}

// isApplied says whether version is recorded in schema_migrations.
func isApplied(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, version int) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&ok)
	return ok, err
}

// applyOutsideTransaction runs m, unless applied before, on one connection
// that holds the advisory lock at session level, and records its version
// once its statement succeeded. It unlocks in every case, and closes the
// connection when the unlock fails or is not sure to have happened.
func applyOutsideTransaction(ctx context.Context, pool *pgxpool.Pool, m Migration) (applied bool, err error) {
	// Applied before (every run after the first): nothing to lock, so that a
	// later `api migrate` through a pooler in transaction mode, where a
	// session lock cannot be held, still finds nothing to do.
	if before, err := isApplied(ctx, pool, m.Version); err != nil || before {
		return false, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	err = retry(ctx, func() (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, advisoryLockKey).Scan(&ok)
		return ok, err
	})
	if err != nil {
		// Interrupted, the statement may yet have taken the lock: the session goes.
		conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // closed either way
		return false, fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		var unlocked bool
		uerr := conn.QueryRow(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, advisoryLockKey).Scan(&unlocked)
		if uerr != nil || !unlocked {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing ends the session and its lock
		}
		if err == nil && uerr == nil && !unlocked {
			// The lock was not this session's: the statements ran on several
			// server sessions, as through a pooler in transaction mode.
			err = errors.New("the migration lock was not held by this session: run on a direct connection, not through a pooler in transaction mode")
		}
	}()
	// Another runner may have applied it meanwhile: read again under the lock.
	if done, err := isApplied(ctx, conn, m.Version); err != nil || done {
		return false, err
	}
	for _, match := range concurrentIndex.FindAllStringSubmatch(m.SQL, -1) {
		name := match[1]
		var invalid bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid)`, name).Scan(&invalid)
		if err != nil {
			return false, fmt.Errorf("looking for an invalid index %s: %w", name, err)
		}
		if invalid {
			if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+pgx.Identifier{strings.ToLower(name)}.Sanitize()); err != nil {
				return false, fmt.Errorf("dropping the invalid index %s: %w", name, err)
			}
		}
	}
	if _, err := conn.Exec(ctx, m.SQL); err != nil {
		return false, err
	}
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, m.Version, m.Name); err != nil {
		return false, fmt.Errorf("recording the version: %w", err)
	}
	return true, nil
}
