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

// read GETs path into out (see get).
func (c *Client) read(ctx context.Context, path string, out any) error {
	a, err := c.get(ctx, path, http.Header{}, maxAnswer)
	if err != nil {
		return err
	}
	if jerr := json.Unmarshal(a.body, out); jerr != nil {
		return fmt.Errorf("labels: GET %s: unreadable answer: %w", path, jerr)
	}
	return nil
}

// get GETs path with header until it is answered 200 or 304, reading at
// most limit bytes. A read changes nothing, so every failure that may pass
// (no answer, 408, 429, 5xx) is retried as CreateLabel retries, within the
// same bounds; any other answer is a final [*ProblemError].
func (c *Client) get(ctx context.Context, path string, header http.Header, limit int64) (answer, error) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		a := c.doLimit(ctx, http.MethodGet, path, nil, header.Clone(), c.attemptTimeout, limit)
		if a.err != nil && ctx.Err() != nil {
			return a, fmt.Errorf("labels: GET %s: %w", path, ctx.Err())
		}
		var err error
		switch {
		case a.err != nil:
			if a.fatal {
				return a, fmt.Errorf("labels: GET %s: %w", path, a.err)
			}
			err = a.err
		case a.status == http.StatusOK, a.status == http.StatusNotModified:
			return a, nil
		default:
			pe := newProblemError("", "", a)
			if !transient(a.status) {
				return a, pe
			}
			err = pe
		}
		delay := max(c.backoff(attempt), a.retryAfter)
		if attempt >= c.maxAttempts || time.Since(start)+delay > c.maxElapsed || !fits(ctx, delay) {
			var pe *ProblemError
			if errors.As(err, &pe) {
				return a, pe
			}
			return a, fmt.Errorf("labels: GET %s: no answer after %d attempts: %w", path, attempt, err)
		}
		if serr := c.sleepFunc(ctx, delay); serr != nil {
			return a, fmt.Errorf("labels: GET %s: %w", path, serr)
		}
	}
}

// maxDocument bounds a label document [Client.LabelDocument] reads: a
// label's PDF or ZPL file is a few kilobytes.
const maxDocument = 16 << 20

// DocumentFile is a label's printable document, as GET
// /v1/labels/{label_id}/document serves it.
type DocumentFile struct {
	// ContentType is its media type, e.g. "application/pdf".
	ContentType string
	// ETag names this version of the document: pass it to the next
	// [Client.LabelDocument] to be told it is unchanged without its bytes.
	ETag string
	// NotModified is true when the ETag given to LabelDocument is still
	// the document's (304): Data is empty then.
	NotModified bool
	// Data is the document's bytes.
	Data []byte
}

// LabelDocument fetches the printable document of the caller's label
// (GET /v1/labels/{label_id}/document): the API fetches it from the carrier,
// so the caller's token is all it takes. With etag not empty (a DocumentFile's
// ETag from before) an unchanged document comes back NotModified, without
// its bytes. A label that is not the caller's, or that has no document, is a
// [*ProblemError] matching [ErrNotFound]; a carrier that does not serve it
// (502 carrier_unavailable) is retried like any transient failure, within
// the same bounds, and then returned as a [*ProblemError].
func (c *Client) LabelDocument(ctx context.Context, labelID, etag string) (*DocumentFile, error) {
	path := "/v1/labels/" + url.PathEscape(labelID) + "/document"
	h := http.Header{}
	h.Set("Accept", "*/*")
	if etag != "" {
		h.Set("If-None-Match", etag)
	}
	a, err := c.get(ctx, path, h, maxDocument)
	if err != nil {
		return nil, err
	}
	f := &DocumentFile{ContentType: a.header.Get("Content-Type"), ETag: a.header.Get("ETag")}
	if a.status == http.StatusNotModified {
		f.NotModified = true
		return f, nil
	}
	f.Data = a.body
	return f, nil
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
