package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
)

// writeJSON writes a JSON body with its status.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeProblemBody writes a saved or fresh problem document.
func writeProblemBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeProblem answers with a problem of code, with the code's status.
func writeProblem(w http.ResponseWriter, r *http.Request, code, detail string) {
	p := labels.NewProblem(code, detail)
	noteOutcome(r, code)
	switch code {
	case labels.CodeRequestInProgress, labels.CodeStoreUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	writeProblemBody(w, p.Status, p.Body())
}

// writeError answers for an error below the handlers: 409
// request_in_progress for a concurrent claim, 503 store_unavailable when the
// database cannot be reached or is overloaded (the caller should retry with
// the same key: fail closed, nothing was carried out), 500 otherwise. Both
// carry Retry-After. It logs the cause; the answer never carries it.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	info := infoFrom(r)
	info.err = err
	switch {
	case errors.Is(err, accept.ErrInProgress):
		info.err = nil
		writeProblem(w, r, labels.CodeRequestInProgress, "a request with this key is being accepted right now; retry with the same key")
	case unavailable(err):
		writeProblem(w, r, labels.CodeStoreUnavailable, "the key store cannot be reached; retry with the same key")
	default:
		info.internal = true
		writeProblem(w, r, labels.CodeInternal, "an internal error occurred; retry with the same key")
	}
}

// unavailable tells errors of reaching or loading the database from errors of
// the statements themselves.
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "53", "57", "58": // connection, resources, operator intervention, system
			return true
		}
		switch pgErr.Code {
		case "40001", "40P01", "55P03": // serialization, deadlock, lock timeout
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, net.ErrClosed) || isClosedConn(err)
}

func isClosedConn(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch e.Error() {
		case "conn closed", "closed pool", "unexpected EOF", "EOF":
			return true
		}
	}
	return false
}
