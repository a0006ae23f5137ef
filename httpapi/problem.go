package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/postgres"
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
// database cannot be reached or is overloaded ([postgres.Unavailable]: the
// caller should retry with the same key; fail closed, nothing was carried
// out), 500 otherwise. Both carry Retry-After. It logs the cause; the answer
// never carries it.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	info := infoFrom(r)
	info.err = err
	switch {
	case errors.Is(err, accept.ErrInProgress):
		info.err = nil
		writeProblem(w, r, labels.CodeRequestInProgress, "a request with this key is being accepted right now; retry with the same key")
	case postgres.Unavailable(err):
		writeProblem(w, r, labels.CodeStoreUnavailable, "the key store cannot be reached; retry with the same key")
	default:
		info.internal = true
		writeProblem(w, r, labels.CodeInternal, "an internal error occurred; retry with the same key")
	}
}
