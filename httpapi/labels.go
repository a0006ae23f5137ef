package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/postgres"
)

// maxBody is the largest request body accepted (api.md: 64 KiB).
const maxBody = 64 << 10

// handleCreateLabel is POST /v1/labels.
func (s *Server) handleCreateLabel(w http.ResponseWriter, r *http.Request, callerID string) {
	info := infoFrom(r)
	key, err := idempotency.ParseKey(r.Header.Values("Idempotency-Key"))
	switch {
	case errors.Is(err, idempotency.ErrKeyMissing):
		writeProblem(w, r, labels.CodeIdempotencyKeyMissing, "POST /v1/labels requires an Idempotency-Key header, the same on every attempt")
		return
	case err != nil:
		writeProblem(w, r, labels.CodeIdempotencyKeyInvalid, "the Idempotency-Key is one field of 1 to 255 visible ASCII characters, bare or as a quoted string")
		return
	}
	info.key = key

	if r.ContentLength > maxBody {
		writeProblem(w, r, labels.CodePayloadTooLarge, "the body is larger than 64 KiB")
		return
	}
	if !jsonContentType(r.Header.Values("Content-Type")) {
		// RFC 9110 §15.5.16: a body in a format the resource does not take.
		w.Header().Set("Accept-Post", "application/json")
		writeProblem(w, r, labels.CodeUnsupportedMediaType, "the body must be sent as Content-Type: application/json")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeProblem(w, r, labels.CodePayloadTooLarge, "the body is larger than 64 KiB")
		return
	}
	if err != nil {
		writeInvalid(w, r, []labels.FieldError{{Message: "the body could not be read"}})
		return
	}
	parcel, errs := parseParcel(body)
	if len(errs) > 0 {
		writeInvalid(w, r, errs)
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), s.deps.Timeout)
	d, err := s.accepter.Accept(ctx, callerID, key, parcel)
	cancel()
	if errors.Is(err, accept.ErrInProgress) {
		s.deps.Metrics.IdempotencyOutcomes.WithLabelValues(metrics.OutcomeInProgress).Inc()
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.deps.Metrics.IdempotencyOutcomes.WithLabelValues(string(d.Outcome)).Inc()
	info.outcome = string(d.Outcome)
	switch {
	case d.Intent != nil:
		info.requestID = d.Intent.RequestID
	case d.Key != nil && d.Outcome == accept.Replayed:
		info.requestID = d.Key.RequestID
	}
	if d.PurgedKey {
		s.deps.Metrics.IdempotencyOutcomes.WithLabelValues(metrics.OutcomePurgedKeyReused).Inc()
		log := s.requestLog(r)
		log.Warn().Str("outcome", string(d.Outcome)).
			Msg("a request arrived with a key that was already purged: a possible duplicate; retention may be shorter than the retry horizon")
	}
	if d.Outcome == accept.Duplicate {
		log := s.requestLog(r)
		log.Warn().Str("existing_key", d.Intent.Key).Msg("a new key for a parcel that already has an intent: the client may be minting a key per attempt")
	}

	switch d.Outcome {
	case accept.KeyReused:
		writeProblem(w, r, labels.CodeIdempotencyKeyReused, "this key was used with a different request; a new intent needs a new key")
		return
	case accept.ParcelLabelled:
		w.Header().Set("Location", "/v1/label-requests/"+d.Intent.RequestID)
		writeProblem(w, r, labels.CodeParcelAlreadyLabelled, "this parcel and label version already have a label request under another key; a reprint needs a new label_version")
		return
	}

	replayed := d.Outcome != accept.Accepted
	// ownKey: the answer is the key's own (stored now, or replayed), not
	// another key's intent caught by the natural key.
	ownKey := d.Outcome == accept.Accepted || d.Outcome == accept.Replayed
	// A completed key answers with the response saved under it, byte for byte.
	if d.Completed() {
		setKeyExpires(w, d.Key.ExpiresAt)
		writeSaved(w, d.Key.ResponseStatus, d.Key.ResponseBody, replayed)
		return
	}
	in, retryAfter, err := s.holdForOutcome(w, r, callerID, d.Intent)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if in.Status == labels.StatusPending {
		if ownKey {
			// Not final yet: when the record would expire if it completed now.
			setKeyExpires(w, time.Now().Add(s.deps.KeyRetention))
		}
		s.writePending(w, in, replayed, retryAfter)
		return
	}
	status, body, err := s.finalAnswer(r.Context(), in)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if ownKey && in.CompletedAt != nil {
		// The completion set the record's expiry to its own time plus the retention.
		setKeyExpires(w, in.CompletedAt.Add(s.deps.KeyRetention))
	}
	writeSaved(w, status, body, replayed)
}

// holdForOutcome honours Prefer: wait=N for a pending intent (api.md): it
// holds the request until the intent is final or N seconds have passed,
// without a database connection, and returns the intent as it then is and
// the Retry-After of an answer that is still pending (1, or the wait asked
// when this process holds as many requests as it may: then the request is
// answered at once, as without the preference).
func (s *Server) holdForOutcome(w http.ResponseWriter, r *http.Request, callerID string, in *postgres.Intent) (*postgres.Intent, int, error) {
	wait, ok := parsePreferWait(r.Header.Values("Prefer"))
	if in.Status != labels.StatusPending || !ok || wait <= 0 {
		return in, 1, nil
	}
	held, ok := s.waiters.add(in.RequestID)
	if !ok {
		s.deps.Metrics.WaitOutcomes.WithLabelValues("capped").Inc()
		return in, int(wait / time.Second), nil
	}
	w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(wait/time.Second)))
	final, err := s.waitFinal(r.Context(), held, callerID, in, wait)
	return final, 1, err
}

// setKeyExpires sets Idempotency-Key-Expires: when the key's record may be
// purged, as an IMF-fixdate (RFC 9110), rounded up to the second so that the
// advertised time is never before the real one.
func setKeyExpires(w http.ResponseWriter, t time.Time) {
	if t.IsZero() {
		return
	}
	if t.Truncate(time.Second) != t {
		t = t.Truncate(time.Second).Add(time.Second)
	}
	w.Header().Set("Idempotency-Key-Expires", t.UTC().Format(http.TimeFormat))
}

// writePending answers 202 with the label request to poll no sooner than
// retryAfter seconds.
func (s *Server) writePending(w http.ResponseWriter, in *postgres.Intent, replayed bool, retryAfter int) {
	lr := labels.LabelRequest{ID: in.RequestID, IdempotencyKey: in.Key, Status: labels.StatusPending, CreatedAt: in.CreatedAt.UTC()}
	body, _ := json.Marshal(lr)
	w.Header().Set("Location", "/v1/label-requests/"+in.RequestID)
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusAccepted, body)
}

// writeSaved answers with a final outcome: 201 and the label, or the saved problem.
func writeSaved(w http.ResponseWriter, status int, body []byte, replayed bool) {
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if status == http.StatusCreated {
		var l struct {
			LabelID string `json:"label_id"`
		}
		if json.Unmarshal(body, &l) == nil && l.LabelID != "" {
			w.Header().Set("Location", "/v1/labels/"+l.LabelID)
		}
		writeJSON(w, status, body)
		return
	}
	writeProblemBody(w, status, body)
}

// finalAnswer renders the outcome of a final intent as a completed key would
// replay it: the label renders to the same bytes as the body saved with it.
func (s *Server) finalAnswer(ctx context.Context, in *postgres.Intent) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.deps.Timeout)
	defer cancel()
	if in.Status == labels.StatusSucceeded {
		l, err := postgres.GetLabel(ctx, s.deps.Pool, in.CallerID, in.LabelID)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusCreated, l.Label.Body(), nil
	}
	var p labels.Problem
	if err := json.Unmarshal(in.Error, &p); err != nil || p.Status == 0 {
		return 0, nil, errors.New("intent has no readable saved problem")
	}
	return p.Status, in.Error, nil
}

// jsonContentType accepts one Content-Type, application/json, with an
// optional UTF-8 charset.
func jsonContentType(values []string) bool {
	if len(values) != 1 {
		return false
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil || mt != "application/json" {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}

// writeInvalid answers 400 invalid_request for a body that does not validate.
func writeInvalid(w http.ResponseWriter, r *http.Request, errs []labels.FieldError) {
	writeInvalidDetail(w, r, "the request body is invalid: see errors", errs...)
}

// writeInvalidQuery answers 400 invalid_request for a query parameter.
func writeInvalidQuery(w http.ResponseWriter, r *http.Request, detail string, e labels.FieldError) {
	writeInvalidDetail(w, r, detail, e)
}

func writeInvalidDetail(w http.ResponseWriter, r *http.Request, detail string, errs ...labels.FieldError) {
	p := labels.NewProblem(labels.CodeInvalidRequest, detail)
	p.Errors = errs
	noteOutcome(r, labels.CodeInvalidRequest)
	writeProblemBody(w, p.Status, p.Body())
}
