package postgres

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// Unavailable says err is a failure to reach the database or a sign of its
// overload, not a failure of the statement itself: nothing was carried out
// because of what the statement asked, and the same request may be retried
// as it is (the API answers 503 store_unavailable with Retry-After). It is
// true for:
//
//   - every failed connect, whatever the server answered (a refused
//     connection is a [*pgconn.ConnectError] wrapping the server's error:
//     55000 for a database not accepting connections, 53300
//     too_many_connections, 57P03 cannot_connect_now, a failed login...);
//   - a server error of class 08 (connection exception), 53 (insufficient
//     resources), 57 (operator intervention: 57P01 admin_shutdown, 57P02
//     crash_shutdown, 57014 a statement timeout), 58 (system error), any
//     FATAL or PANIC (the server ended the session), 40001, 40P01, 55P03
//     (serialization failure, deadlock, lock timeout), and 25006
//     read_only_sql_transaction (a session on a standby, when the URL does
//     not ask for target_session_attrs=read-write: no server takes writes
//     there until a failover promotes it);
//   - a lost or closed connection or pool (pgx's errors safe to retry,
//     [pgconn.ErrConnClosed], a network error, the end of the stream), and a
//     deadline or cancellation.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return serverUnavailable(pgErr)
	}
	var netErr net.Error
	return errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// serverUnavailable classifies an error the server sent on an open session.
func serverUnavailable(e *pgconn.PgError) bool {
	severity := e.SeverityUnlocalized
	if severity == "" {
		severity = e.Severity
	}
	switch severity {
	case "FATAL", "PANIC":
		return true
	}
	if len(e.Code) == 5 {
		switch e.Code[:2] {
		case "08", "53", "57", "58":
			return true
		}
	}
	switch e.Code {
	case "40001", "40P01", "55P03", "25006":
		return true
	}
	return false
}
