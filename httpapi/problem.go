package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/labelkit/labels"
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

// writeProblem answers with a problem of code.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, code, detail string) {
	p := labels.NewProblem(status, code, detail)
	noteOutcome(r, code)
	writeProblemBody(w, status, p.Body())
}

// storeError answers for an error of the store: 503 store_unavailable with
// Retry-After when the database cannot be reached or is overloaded (the caller
// should retry with the same key: fail closed, nothing was carried out), 500
// otherwise. It logs the cause; the answer never carries it.
func storeError(w http.ResponseWriter, r *http.Request, err error) {
	info := infoFrom(r)
	if unavailable(err) {
		info.err = err
		w.Header().Set("Retry-After", "1")
		writeProblem(w, r, http.StatusServiceUnavailable, labels.CodeStoreUnavailable, "the key store cannot be reached; retry with the same key")
		return
	}
	info.err = err
	info.internal = true
	writeProblem(w, r, http.StatusInternalServerError, labels.CodeInternal, "an internal error occurred; retry with the same key")
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
