package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxAnswer bounds what is read of one answer: a label or a problem is a few
// hundred bytes.
const maxAnswer = 1 << 20

// maxKeyLen is the longest key the API accepts.
const maxKeyLen = 255

// Client calls the label service. It is safe for concurrent use.
type Client struct {
	baseURL    string
	token      string
	httpClient *http.Client

	maxAttempts    int
	maxElapsed     time.Duration
	backoffBase    time.Duration
	backoffMax     time.Duration
	wait           time.Duration
	maxWait        time.Duration
	pollInterval   time.Duration
	attemptTimeout time.Duration

	// Hooks for tests: how to wait, and the jitter draw in [0, limit].
	sleepFunc  func(ctx context.Context, d time.Duration) error
	jitterFunc func(limit time.Duration) time.Duration
}

// New returns a client for the API at baseURL (e.g. "https://labels.example")
// that authenticates with the bearer token.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		baseURL:        strings.TrimRight(baseURL, "/"),
		token:          token,
		maxAttempts:    DefaultMaxAttempts,
		maxElapsed:     DefaultMaxElapsed,
		backoffBase:    DefaultBackoffBase,
		backoffMax:     DefaultBackoffMax,
		wait:           DefaultWait,
		maxWait:        DefaultMaxWait,
		pollInterval:   DefaultPollInterval,
		attemptTimeout: DefaultAttemptTimeout,
		sleepFunc:      sleep,
		jitterFunc:     jitter,
	}
	for _, o := range opts {
		o(c)
	}
	if c.httpClient == nil {
		c.httpClient = &http.Client{
			// A redirect is not part of the API; following one would turn the
			// POST into a GET. It is returned as a final error instead.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return c
}

// DeriveKey returns the idempotency key of the intent "a label for this
// parcel, this version": label:{order_id}:{parcel_no}:v{label_version}, e.g.
// label:918273:1:v1. A zero LabelVersion counts as 1, as in the API. The key
// holds no personal data.
func DeriveKey(p Parcel) string {
	return fmt.Sprintf("label:%d:%d:v%d", p.OrderID, p.ParcelNo, max(p.LabelVersion, 1))
}

// CreateLabel asks for one label for parcel and returns it once bought. It
// sends the parcel's derived key ([DeriveKey]) or the one given with [WithKey]
// on every attempt, retries what is transient, and waits for the outcome (see
// the package documentation for the rules). A zero LabelVersion is sent as 1.
//
// After an error for which [IsTemporary] is true, calling CreateLabel again
// with the same parcel is safe and is how the outcome is learnt: the API
// answers a repeat from the key and never buys twice.
func (c *Client) CreateLabel(ctx context.Context, parcel Parcel, opts ...CreateOption) (*Label, error) {
	var o createOpts
	for _, opt := range opts {
		opt(&o)
	}
	if parcel.LabelVersion == 0 {
		parcel.LabelVersion = 1
	}
	key := o.key
	if key == "" {
		key = DeriveKey(parcel)
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	body, err := json.Marshal(parcel)
	if err != nil {
		return nil, err
	}
	l, pending, err := c.submit(ctx, key, body)
	if err != nil || l != nil {
		return l, err
	}
	return c.await(ctx, key, pending)
}

// accepted is a 202: the request to poll and when to look first.
type accepted struct {
	requestID  string
	retryAfter time.Duration
}

// submit posts the request until it is answered for good: a label, an
// accepted request to wait for, or a final error.
func (c *Client) submit(ctx context.Context, key string, body []byte) (*Label, *accepted, error) {
	start := time.Now()
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set("Idempotency-Key", quoteKey(key))
	for attempt := 1; ; attempt++ {
		h := header.Clone()
		wait := c.preferWait(ctx)
		if wait > 0 {
			h.Set("Prefer", "wait="+strconv.Itoa(wait))
		}
		a := c.do(ctx, http.MethodPost, "/v1/labels", body, h, c.attemptTimeout+time.Duration(wait)*time.Second)
		if a.err != nil && ctx.Err() != nil {
			return nil, nil, fmt.Errorf("labels: key %q: outcome unknown: %w", key, ctx.Err())
		}
		v := c.classifyCreate(key, a)
		if !v.retry {
			if u, ok := v.err.(*UnavailableError); ok {
				u.Attempts = attempt
			}
			return v.label, v.accepted, v.err
		}
		gaveUp := func() error {
			u := &UnavailableError{Key: key, Attempts: attempt, Err: v.err}
			var pe *ProblemError
			if errors.As(v.err, &pe) {
				u.Problem = &pe.Problem
			}
			return u
		}
		if attempt >= c.maxAttempts {
			return nil, nil, gaveUp()
		}
		delay := max(c.backoff(attempt), a.retryAfter)
		if time.Since(start)+delay > c.maxElapsed || !fits(ctx, delay) {
			return nil, nil, gaveUp()
		}
		if err := c.sleepFunc(ctx, delay); err != nil {
			return nil, nil, fmt.Errorf("labels: key %q: outcome unknown: %w", key, err)
		}
	}
}

// await polls an accepted request until its outcome is final, or returns a
// PendingError when WithMaxWait or the context runs out first.
func (c *Client) await(ctx context.Context, key string, acc *accepted) (*Label, error) {
	pending := &PendingError{Key: key, RequestID: acc.requestID}
	stop := time.Now().Add(c.maxWait)
	delay := max(c.pollInterval, acc.retryAfter)
	failures := 0
	for {
		if time.Now().Add(delay).After(stop) || !fits(ctx, delay) {
			return nil, pending
		}
		if err := c.sleepFunc(ctx, delay); err != nil {
			return nil, fmt.Errorf("%w: %w", pending, err)
		}
		a := c.do(ctx, http.MethodGet, "/v1/label-requests/"+url.PathEscape(acc.requestID), nil, http.Header{}, c.attemptTimeout)
		if a.err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", pending, ctx.Err())
		}
		if a.err != nil || transient(a.status) {
			failures++
			delay = max(c.backoff(failures), a.retryAfter)
			continue
		}
		if a.status != http.StatusOK {
			return nil, newProblemError(key, acc.requestID, a)
		}
		var lr LabelRequest
		if err := json.Unmarshal(a.body, &lr); err != nil {
			return nil, fmt.Errorf("labels: key %q: unreadable label request: %w", key, err)
		}
		switch lr.Status {
		case StatusSucceeded:
			var l Label
			if err := json.Unmarshal(lr.Label, &l); err != nil || l.LabelID == "" {
				return nil, fmt.Errorf("labels: key %q: label request %s succeeded without a readable label", key, lr.ID)
			}
			return &l, nil
		case StatusFailed:
			var p Problem
			if err := json.Unmarshal(lr.Error, &p); err != nil || p.Code == "" {
				return nil, fmt.Errorf("labels: key %q: label request %s failed without a readable problem", key, lr.ID)
			}
			return nil, finalProblem(key, lr.ID, false, p)
		}
		failures = 0
		delay = max(c.pollInterval, a.retryAfter)
	}
}

// verdict is what one POST answer means.
type verdict struct {
	label    *Label
	accepted *accepted
	retry    bool  // transient: try again with the same key
	err      error // final when !retry, else what went wrong
}

// classifyCreate reads one answer to POST /v1/labels.
func (c *Client) classifyCreate(key string, a answer) verdict {
	if a.err != nil {
		return verdict{retry: !a.fatal, err: a.err}
	}
	switch a.status {
	case http.StatusCreated:
		var l Label
		if err := json.Unmarshal(a.body, &l); err != nil || l.LabelID == "" {
			return verdict{err: fmt.Errorf("labels: key %q: 201 without a readable label", key)}
		}
		return verdict{label: &l}
	case http.StatusAccepted:
		var lr LabelRequest
		if err := json.Unmarshal(a.body, &lr); err != nil || lr.ID == "" {
			return verdict{err: fmt.Errorf("labels: key %q: 202 without a readable label request", key)}
		}
		return verdict{accepted: &accepted{requestID: lr.ID, retryAfter: a.retryAfter}}
	}
	if a.status < 400 {
		return verdict{err: fmt.Errorf("labels: key %q: unexpected answer %d", key, a.status)}
	}
	p := readProblem(a)
	replayed := a.header.Get("Idempotent-Replayed") == "true"
	requestID := strings.TrimPrefix(a.header.Get("Location"), "/v1/label-requests/")
	if requestID == a.header.Get("Location") {
		requestID = ""
	}
	switch {
	// A saved outcome of the intent is final, whatever its status: a 502
	// carrier_unavailable is the carrier's story, not the API's.
	case p.Code == CodeCarrierRejected || p.Code == CodeCarrierUnavailable:
		return verdict{err: finalProblem(key, requestID, replayed, p)}
	case a.status == http.StatusConflict:
		return verdict{retry: p.Code == CodeRequestInProgress, err: newProblemError(key, requestID, a)}
	case transient(a.status):
		return verdict{retry: true, err: newProblemError(key, "", a)}
	}
	return verdict{err: newProblemError(key, requestID, a)}
}

// transient tells the statuses worth another attempt with the same key.
func transient(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

// finalProblem turns a saved or final problem into its error type.
func finalProblem(key, requestID string, replayed bool, p Problem) error {
	switch p.Code {
	case CodeCarrierRejected:
		return &RejectedError{Key: key, RequestID: requestID, CarrierCode: p.CarrierCode, CarrierMessage: p.CarrierMessage, Problem: p}
	case CodeCarrierUnavailable:
		return &UnavailableError{Key: key, RequestID: requestID, Final: true, Problem: &p}
	}
	return &ProblemError{Key: key, RequestID: requestID, Replayed: replayed, Problem: p}
}

// readProblem reads a problem answer; an answer that is not one (a proxy's
// HTML page) becomes a problem with the status and no code.
func readProblem(a answer) Problem {
	var p Problem
	mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		_ = json.Unmarshal(a.body, &p)
	}
	if p.Status == 0 {
		p.Status = a.status
	}
	if p.Title == "" {
		p.Title = http.StatusText(a.status)
	}
	return p
}

// answer is one HTTP exchange, read whole.
type answer struct {
	status     int
	header     http.Header
	body       []byte
	retryAfter time.Duration
	err        error // no answer (or only part of one)
	fatal      bool  // err is not worth a retry: the request could not be made
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, header http.Header, timeout time.Duration) answer {
	return c.doLimit(ctx, method, path, body, header, timeout, maxAnswer)
}

// doLimit is do reading at most limit bytes of the answer; a longer one is
// an error that is not retried.
func (c *Client) doLimit(ctx context.Context, method, path string, body []byte, header http.Header, timeout time.Duration, limit int64) answer {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, c.baseURL+path, rd)
	if err != nil {
		return answer{err: err, fatal: true}
	}
	req.Header = header
	req.Header.Set("Authorization", "Bearer "+c.token)
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json, application/problem+json")
	}
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		// The reply was cut: as good as lost.
		return answer{err: fmt.Errorf("reading the answer to %s %s: %w", method, path, err)}
	}
	if int64(len(b)) > limit {
		return answer{err: fmt.Errorf("the answer to %s %s is over %d bytes", method, path, limit), fatal: true}
	}
	return answer{
		status:     resp.StatusCode,
		header:     resp.Header,
		body:       b,
		retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// preferWait returns the whole seconds of Prefer: wait for the next POST:
// the configured wait, at most 30, and short enough to answer within the
// context's deadline. Zero means no preference.
func (c *Client) preferWait(ctx context.Context) int {
	n := min(int(c.wait/time.Second), 30)
	if dl, ok := ctx.Deadline(); ok {
		// Leave a second for the answer to travel back.
		n = min(n, int((time.Until(dl)-time.Second)/time.Second))
	}
	return max(n, 0)
}

// backoff is the delay before retry n (from 1): full jitter over an
// exponentially growing ceiling.
func (c *Client) backoff(n int) time.Duration {
	d := c.backoffBase
	for i := 1; i < n && d > 0 && d < c.backoffMax; i++ {
		d *= 2
	}
	return c.jitterFunc(min(d, c.backoffMax))
}

// fits tells whether waiting d still ends before the context's deadline.
func fits(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Now().Add(d).Before(dl)
}

func jitter(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(limit) + 1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3); anything else, or a time past, is zero.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// checkKey applies the API's rule: 1 to 255 visible ASCII characters.
func checkKey(key string) error {
	if len(key) == 0 || len(key) > maxKeyLen {
		return fmt.Errorf("%w: %d characters, want 1 to %d", ErrInvalidKey, len(key), maxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return fmt.Errorf("%w: character %q at %d is not visible ASCII", ErrInvalidKey, key[i], i)
		}
	}
	return nil
}

// quoteKey renders the key as the Structured-Field string the draft
// specifies ("label:918273:1:v1"), so that no key, not even one that starts
// with a quote, can be read as something else.
func quoteKey(key string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}
