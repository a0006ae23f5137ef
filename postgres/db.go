package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what the single-row reads need: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// sqlOutcome is an outcome constant as the SQL literal that a statement
// returning an outcome per row ([sqlAccept], [sqlLease], [sqlComplete])
// selects: the statements are built from the constants, so the numbers
// cannot drift from their iota order.
func sqlOutcome[T AcceptResult | LeaseResult | CompleteResult](r T) string {
	return strconv.Itoa(int(r))
}

// ErrNotFound says no row matches.
var ErrNotFound = errors.New("postgres: not found")

// IdleInTransactionTimeout ends a service session that stays idle inside a
// transaction this long (a process frozen between two statements of its
// transaction), so that the row locks it holds are released. Every
// transaction of the services is sent in one or a few back-to-back round
// trips, far below it.
const IdleInTransactionTimeout = 15 * time.Second

// PoolConfig parses a connection string for a service pool: the sessions
// carry [IdleInTransactionTimeout].
func PoolConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	Configure(cfg.ConnConfig)
	return cfg, nil
}

// Configure sets the session settings of a service connection.
func Configure(cfg *pgx.ConnConfig) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if _, ok := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = IdleInTransactionTimeout.String()
	}
}

// IsLockTimeout says err is PostgreSQL's lock_timeout (55P03).
func IsLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// rollback ends a transaction left open on conn by a failed batch, or closes
// the connection when even that fails, so that it is never reused dirty.
func rollback(ctx context.Context, conn *pgxpool.Conn) {
	if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // a broken connection is not reused
	}
}

// Endpoints is how a service reaches PostgreSQL: DATABASE_URL for every
// statement, possibly through a connection pooler in transaction mode, and
// DATABASE_DIRECT_URL, when set, for what needs a session of its own (LISTEN,
// migrations' lock).
type Endpoints struct {
	Pool *pgxpool.Config // DATABASE_URL
	// Direct is DATABASE_DIRECT_URL's configuration, nil when it is unset.
	Direct *pgxpool.Config
	// Pooled says DATABASE_URL is a pooler in transaction mode: two
	// transactions of one client may run on two server sessions, so nothing
	// may rely on a session outliving its transaction.
	Pooled bool
}

// ParseEndpoints parses DATABASE_URL and DATABASE_DIRECT_URL (optional).
// Through a pooler, the pool prepares no named statement (pgx's
// cache_describe: unnamed statements, their descriptions cached; a URL's own
// default_query_exec_mode wins), since PgBouncer before 1.21 (Debian 12 ships
// 1.18) does not carry one across server sessions, and sends no startup
// setting, since PgBouncer refuses unknown ones: the pooler's
// idle_transaction_timeout takes the place of [IdleInTransactionTimeout].
func ParseEndpoints(url, directURL string, pooled bool) (Endpoints, error) {
	e := Endpoints{Pooled: pooled}
	var err error
	if pooled {
		if e.Pool, err = pgxpool.ParseConfig(url); err != nil {
			return e, err
		}
		if !strings.Contains(url, "default_query_exec_mode") {
			e.Pool.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	} else if e.Pool, err = PoolConfig(url); err != nil {
		return e, err
	}
	if directURL != "" {
		if e.Direct, err = PoolConfig(directURL); err != nil {
			return e, fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
		}
	}
	return e, nil
}

// Listen is the connection for LISTEN: the direct one when set, else
// DATABASE_URL unless it is pooled; nil means there is none, and the
// listeners poll.
func (e Endpoints) Listen() *pgx.ConnConfig {
	switch {
	case e.Direct != nil:
		return e.Direct.ConnConfig.Copy()
	case e.Pooled:
		return nil
	}
	return e.Pool.ConnConfig.Copy()
}

// Session is the pool for work that wants sessions of its own (the
// migrations): the direct one when set, else DATABASE_URL's.
func (e Endpoints) Session() *pgxpool.Config {
	if e.Direct != nil {
		return e.Direct.Copy()
	}
	return e.Pool.Copy()
}
