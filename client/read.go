package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// GetLabel returns the caller's label by id (GET /v1/labels/{label_id}), with
// its document when the carrier named one. A label that is not the caller's
// is a [*ProblemError] matching [ErrNotFound].
func (c *Client) GetLabel(ctx context.Context, labelID string) (*Label, error) {
	var l Label
	if err := c.read(ctx, "/v1/labels/"+url.PathEscape(labelID), &l); err != nil {
		return nil, err
	}
	if l.LabelID == "" {
		return nil, fmt.Errorf("labels: GET /v1/labels/%s: 200 without a readable label", labelID)
	}
	return &l, nil
}

// GetLabelRequest returns the caller's label request by id (GET
// /v1/label-requests/{id}): pending, or final with its label or its saved
// problem. Unlike CreateLabel it does not wait.
func (c *Client) GetLabelRequest(ctx context.Context, requestID string) (*LabelRequest, error) {
	return c.readRequest(ctx, "/v1/label-requests/"+url.PathEscape(requestID))
}

// FindByKey returns the caller's label request made under idempotency key
// (GET /v1/label-requests?idempotency_key=K), e.g. to learn what became of a
// key after a crash; [DeriveKey] gives a parcel's. No request under the key is
// a [*ProblemError] matching [ErrNotFound].
func (c *Client) FindByKey(ctx context.Context, key string) (*LabelRequest, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return c.readRequest(ctx, "/v1/label-requests?idempotency_key="+url.QueryEscape(key))
}

func (c *Client) readRequest(ctx context.Context, path string) (*LabelRequest, error) {
	var lr LabelRequest
	if err := c.read(ctx, path, &lr); err != nil {
		return nil, err
	}
	if lr.ID == "" {
		return nil, fmt.Errorf("labels: GET %s: 200 without a readable label request", path)
	}
	return &lr, nil
}

// read GETs path into out. A read changes nothing, so every failure that may
// pass (no answer, 408, 429, 5xx) is retried as CreateLabel retries, within
// the same bounds; any other answer but 200 is a final [*ProblemError].
func (c *Client) read(ctx context.Context, path string, out any) error {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		a := c.do(ctx, http.MethodGet, path, nil, http.Header{}, c.attemptTimeout)
		if a.err != nil && ctx.Err() != nil {
			return fmt.Errorf("labels: GET %s: %w", path, ctx.Err())
		}
		var err error
		switch {
		case a.err != nil:
			if a.fatal {
				return fmt.Errorf("labels: GET %s: %w", path, a.err)
			}
			err = a.err
		case a.status == http.StatusOK:
			if jerr := json.Unmarshal(a.body, out); jerr != nil {
				return fmt.Errorf("labels: GET %s: unreadable answer: %w", path, jerr)
			}
			return nil
		default:
			pe := newProblemError("", "", a)
			if !transient(a.status) {
				return pe
			}
			err = pe
		}
		delay := max(c.backoff(attempt), a.retryAfter)
		if attempt >= c.maxAttempts || time.Since(start)+delay > c.maxElapsed || !fits(ctx, delay) {
			var pe *ProblemError
			if errors.As(err, &pe) {
				return pe
			}
			return fmt.Errorf("labels: GET %s: no answer after %d attempts: %w", path, attempt, err)
		}
		if serr := c.sleepFunc(ctx, delay); serr != nil {
			return fmt.Errorf("labels: GET %s: %w", path, serr)
		}
	}
}

// newProblemError reads a problem answer into a ProblemError, with the
// server's X-Request-Id.
func newProblemError(key, requestID string, a answer) *ProblemError {
	return &ProblemError{
		Key:           key,
		RequestID:     requestID,
		Replayed:      a.header.Get("Idempotent-Replayed") == "true",
		Problem:       readProblem(a),
		HTTPRequestID: a.header.Get("X-Request-Id"),
	}
}
