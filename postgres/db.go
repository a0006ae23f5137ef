package postgres

import (
	"context"
	"errors"
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
