package migrations

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// BehindError says that the database lacks migrations this binary needs:
// every binary refuses to start on it, and a readiness probe answers 503
// with it, until `api migrate` has run.
type BehindError struct {
	Missing      []string // our migrations not applied, by file name
	RiverMissing []int    // River's migration versions not applied
}

func (e *BehindError) Error() string {
	var parts []string
	if n := len(e.Missing); n > 0 {
		parts = append(parts, fmt.Sprintf("%d of ours (from %s)", n, e.Missing[0]))
	}
	if n := len(e.RiverMissing); n > 0 {
		parts = append(parts, fmt.Sprintf("%d of River's (from version %d)", n, e.RiverMissing[0]))
	}
	return fmt.Sprintf("the database schema is behind this binary: %s not applied; run `api migrate`", strings.Join(parts, " and "))
}

// Check returns nil when every migration this binary knows, ours and
// River's, is applied (a database ahead of it, as during a rolling upgrade
// after `api migrate`, is fine), a *BehindError when some is not, and the
// database's error when it could not be read.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := All()
	if err != nil {
		return err
	}
	behind := &BehindError{}
	var applied []int32
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if exists {
		rows, err := pool.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		for rows.Next() {
			var v int32
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return fmt.Errorf("reading the schema version: %w", err)
			}
			applied = append(applied, v)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
	}
	have := make(map[int]bool, len(applied))
	for _, v := range applied {
		have[int(v)] = true
	}
	for _, m := range all {
		if !have[m.Version] {
			behind.Missing = append(behind.Missing, m.Name)
		}
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	existing, err := migrator.ExistingVersions(ctx)
	if err != nil {
		return fmt.Errorf("reading River's schema version: %w", err)
	}
	haveRiver := make(map[int]bool, len(existing))
	for _, m := range existing {
		haveRiver[m.Version] = true
	}
	for _, m := range migrator.AllVersions() {
		if !haveRiver[m.Version] {
			behind.RiverMissing = append(behind.RiverMissing, m.Version)
		}
	}
	if len(behind.Missing) > 0 || len(behind.RiverMissing) > 0 {
		return behind
	}
	return nil
}

// IsBehind reports whether err is (or wraps) a [BehindError].
func IsBehind(err error) bool {
	var b *BehindError
	return errors.As(err, &b)
}

// Gate answers a readiness probe: the database answers and its schema is
// current. It pings on every call, as a probe did before, and reads the
// schema version only when needed: on the first successful ping, on the
// first successful one after a failed one (the database may have been
// replaced), and while the schema is behind at most every RecheckBehind (so
// that the probe turns ready after `api migrate` without a restart).
type Gate struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	known   bool      // a check ran since the last failed ping
	err     error     // its outcome
	checked time.Time // when
	now     func() time.Time
}

// RecheckBehind is how often a [Gate] reads the schema version again while
// it is behind.
const RecheckBehind = 5 * time.Second

// NewGate returns a Gate over pool; its first successful [Gate.Ready]
// checks the schema.
func NewGate(pool *pgxpool.Pool) *Gate { return &Gate{pool: pool, now: time.Now} }

// Ready returns nil when the database answers a ping and its schema is
// current, a *BehindError when the schema is behind, and the ping's error
// otherwise.
func (g *Gate) Ready(ctx context.Context) error {
	if err := g.pool.Ping(ctx); err != nil {
		g.mu.Lock()
		g.known = false
		g.mu.Unlock()
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.known && (g.err == nil || g.now().Sub(g.checked) < RecheckBehind) {
		return g.err
	}
	err := Check(ctx, g.pool)
	if err != nil && !IsBehind(err) {
		return err // not known: read again next time
	}
	g.known, g.err, g.checked = true, err, g.now()
	return err
}

// Check reads the schema version now ([Check]) and keeps the outcome for
// the probes: what a binary runs at start.
func (g *Gate) Check(ctx context.Context) error {
	err := Check(ctx, g.pool)
	g.Seed(err)
	return err
}

// Seed records the outcome of a [Check] the caller ran at start, so that
// the first probe does not read the version again.
func (g *Gate) Seed(err error) {
	if err != nil && !IsBehind(err) {
		return
	}
	g.mu.Lock()
	g.known, g.err, g.checked = true, err, g.now()
	g.mu.Unlock()
}
