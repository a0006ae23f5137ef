package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/migrations"
	"github.com/labelkit/labels/postgres"
)

// handleGetLabelRequest is GET /v1/label-requests/{id}.
func (s *Server) handleGetLabelRequest(w http.ResponseWriter, r *http.Request, callerID string) {
	ctx, cancel := context.WithTimeout(r.Context(), s.deps.Timeout)
	defer cancel()
	in, err := postgres.GetIntent(ctx, s.deps.Pool, callerID, r.PathValue("id"))
	cancel()
	s.writeLabelRequest(w, r, callerID, in, err)
}

// handleFindLabelRequest is GET /v1/label-requests?idempotency_key=K.
func (s *Server) handleFindLabelRequest(w http.ResponseWriter, r *http.Request, callerID string) {
	key, err := idempotency.ParseKey(r.URL.Query()["idempotency_key"])
	switch {
	case errors.Is(err, idempotency.ErrKeyMissing):
		writeInvalidQuery(w, r, "the idempotency_key query parameter is missing",
			labels.FieldError{Field: "idempotency_key", Message: "is required: GET /v1/label-requests?idempotency_key=KEY"})
		return
	case err != nil:
		writeInvalidQuery(w, r, "the idempotency_key query parameter is invalid",
			labels.FieldError{Field: "idempotency_key", Message: "must be one query parameter of 1 to 255 visible ASCII characters"})
		return
	}
	infoFrom(r).key = key
	ctx, cancel := context.WithTimeout(r.Context(), s.deps.Timeout)
	defer cancel()
	in, err := postgres.GetIntentByKey(ctx, s.deps.Pool, callerID, key)
	cancel()
	s.writeLabelRequest(w, r, callerID, in, err)
}

// writeLabelRequest answers a label request read by id or by key, held
// first for its outcome when the request prefers to wait (as the create is).
func (s *Server) writeLabelRequest(w http.ResponseWriter, r *http.Request, callerID string, in *postgres.Intent, err error) {
	if !found(w, r, err, "label request") {
		return
	}
	infoFrom(r).requestID = in.RequestID
	in, retryAfter, err := s.holdForOutcome(w, r, callerID, in)
	if err != nil {
		writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.deps.Timeout)
	defer cancel()
	lr, err := s.labelRequest(ctx, in)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body, _ := json.Marshal(lr)
	if in.Status == labels.StatusPending {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	writeJSON(w, http.StatusOK, body)
}

// labelRequest renders an intent as a LabelRequest (as webhook events carry it).
func (s *Server) labelRequest(ctx context.Context, in *postgres.Intent) (*labels.LabelRequest, error) {
	return postgres.LabelRequestOf(ctx, s.deps.Pool, in)
}

// handleGetLabel is GET /v1/labels/{label_id}.
func (s *Server) handleGetLabel(w http.ResponseWriter, r *http.Request, callerID string) {
	if l, ok := s.callerLabel(w, r, callerID); ok {
		writeJSON(w, http.StatusOK, l.Label.Body())
	}
}

// callerLabel reads the caller's label named by the path's {label_id},
// within the store timeout, and names its request in the request's log
// line. A label that is not the caller's, or none at all, is answered 404
// (and a store that fails, its error), and callerLabel reports false.
func (s *Server) callerLabel(w http.ResponseWriter, r *http.Request, callerID string) (*postgres.Label, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), s.deps.Timeout)
	defer cancel()
	l, err := postgres.GetLabel(ctx, s.deps.Pool, callerID, r.PathValue("label_id"))
	if !found(w, r, err, "label") {
		return nil, false
	}
	infoFrom(r).requestID = l.RequestID
	return l, true
}

// found answers a lookup that failed, 404 "no such <what>" when there is
// none and the store's error otherwise, and reports whether it found one.
func found(w http.ResponseWriter, r *http.Request, err error, what string) bool {
	switch {
	case errors.Is(err, postgres.ErrNotFound):
		writeProblem(w, r, labels.CodeNotFound, "no such "+what)
		return false
	case err != nil:
		writeError(w, r, err)
		return false
	}
	return true
}

func handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

// handleReadyz is 200 when the database answers and its schema is current
// (Deps.Ready), 503 store_unavailable (with Retry-After, as every request
// answers it then) otherwise: a failed ping of any kind means the requests
// cannot be served, and a schema behind the binary that they would fail.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	ready := s.deps.Ready
	if ready == nil {
		ready = s.deps.Pool.Ping
	}
	if err := ready(ctx); err != nil {
		detail := "the database does not answer"
		if migrations.IsBehind(err) {
			detail = err.Error()
		}
		writeProblem(w, r, labels.CodeStoreUnavailable, detail)
		return
	}
	writeJSON(w, http.StatusOK, []byte(`{"status":"ready"}`))
}
