package carrier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// maxLabelBody bounds what we read of a purchase answer: a label is a few hundred
// bytes, and a carrier that sends megabytes is not answering the protocol.
const maxLabelBody = 1 << 20

// Address is where a parcel goes.
type Address struct {
	Name       string `json:"name"`
	Line1      string `json:"line1"`
	Line2      string `json:"line2"`
	City       string `json:"city"`
	PostalCode string `json:"postal_code"`
	Country    string `json:"country"`
}

// PurchaseRequest is the body of POST /v1/labels.
type PurchaseRequest struct {
	// Reference is our label request id; the carrier echoes it on the invoice.
	Reference string  `json:"reference"`
	OrderID   int64   `json:"order_id"`
	ParcelNo  int     `json:"parcel_no"`
	WeightG   int     `json:"weight_g"`
	Service   string  `json:"service"`
	ShipTo    Address `json:"ship_to"`
}

// Label is a bought label as the carrier describes it.
type Label struct {
	CarrierLabelID string    `json:"carrier_label_id"`
	TrackingNo     string    `json:"tracking_no"`
	CostCents      int64     `json:"cost_cents"`
	Currency       string    `json:"currency"`
	PurchasedAt    time.Time `json:"purchased_at"`
	// LabelURL names the printable label document (PDF or ZPL) the carrier
	// serves, of media type LabelContentType and LabelSizeBytes bytes. The
	// three are optional in the protocol and go together: a carrier that
	// names no document (or only part of one) still sold the label.
	LabelURL         string `json:"label_url,omitempty"`
	LabelContentType string `json:"label_content_type,omitempty"`
	LabelSizeBytes   *int64 `json:"label_size_bytes,omitempty"`
	// Status is what became of the label since it was sold: absent or
	// [StatusActive] for a live label, [StatusVoided] (with VoidedAt) for
	// one the carrier voided, which ships nothing. A purchase answer names a
	// voided label only when it replays a key whose label was voided since;
	// [Client.Buy] never returns one (see [CheckStatus]).
	Status   string     `json:"status,omitempty"`
	VoidedAt *time.Time `json:"voided_at,omitempty"`
	// Replayed is true when the carrier answered 200: the key had bought this
	// label before, on an attempt whose reply we may never have seen.
	Replayed bool `json:"-"`
}

// HasDocument tells whether the answer named a whole label document: a URL,
// a media type and a size.
func (l *Label) HasDocument() bool {
	return l.LabelURL != "" && l.LabelContentType != "" && l.LabelSizeBytes != nil && *l.LabelSizeBytes >= 0
}

// ClientOpts configures a [Client].
type ClientOpts struct {
	// Token, when not empty, is sent as "Authorization: Bearer <Token>".
	Token string
	// HTTPClient makes the calls. Nil means a default client with no overall
	// timeout (callers bound each call with a context deadline) that keeps
	// InFlight idle connections to the carrier.
	HTTPClient *http.Client
	// InFlight is how many calls the caller makes at once (a worker's
	// concurrency); the default client keeps that many idle connections, so
	// that a call finds one open. Zero means 128. Ignored with HTTPClient.
	InFlight int
}

// Client speaks the carrier protocol. It is safe for concurrent use.
type Client struct {
	baseURL    string
	token      string
	httpClient *http.Client
}

// DefaultTimeout is CARRIER_TIMEOUT's default: how long one carrier call
// may take (a worker's purchase, the API's fetch of a label document).
const DefaultTimeout = 20 * time.Second

// DefaultBaseURL is CARRIER_URL's default: the simulator (cmd/carrier) on
// its default address.
const DefaultBaseURL = "http://127.0.0.1:8090"

// NewClient returns a client for the carrier at baseURL (e.g.
// [DefaultBaseURL]). opts may be nil.
func NewClient(baseURL string, opts *ClientOpts) *Client {
	if opts == nil {
		opts = &ClientOpts{}
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient(opts.InFlight)
	}
	return &Client{
		baseURL:    strings.TrimRight(baseURL, "/"),
		token:      opts.Token,
		httpClient: hc,
	}
}

func defaultHTTPClient(inFlight int) *http.Client {
	if inFlight <= 0 {
		inFlight = 128
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Go's default of 2 idle connections per host makes a worker with 100 calls
	// in flight open and close connections all the time; so did 128 idle ones
	// with 400 in flight (dialling was about 6% of the worker's CPU at 50 ms).
	tr.MaxIdleConns = inFlight
	tr.MaxIdleConnsPerHost = inFlight
	return &http.Client{
		Transport: tr,
		// A redirect is not part of the protocol; following one would turn the
		// POST into a GET. Surface the 3xx instead, as an unknown outcome.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Buy buys one label under carrierKey (see [DeriveKey]). The error is a
// [*RejectedError], an [*InProgressError] or an [*UnknownOutcomeError] as the
// protocol's table says, or, before anything is sent, a wrapped [ErrInvalidKey].
// A label the carrier says is voided (a replay of a key whose label was
// voided since) is a [*RejectedError] with the code [CodeLabelVoided]: the
// key will always name that dead label. A label with a status the protocol
// does not name is an [*UnknownOutcomeError].
func (c *Client) Buy(ctx context.Context, carrierKey string, req PurchaseRequest) (*Label, error) {
	if err := ValidateKey(carrierKey); err != nil {
		return nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("carrier: encode purchase: %w", err)
	}
	resp, err := c.post(ctx, "/v1/labels", carrierKey, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readPurchase(resp, time.Now())
}

// post sends one keyed POST to the carrier (body is JSON, or nil for none).
// A failure to get an answer is an [*UnknownOutcomeError]: refused, reset,
// timed out, or the caller's context ended, the request may have reached the
// carrier, so its effect may have happened.
func (c *Client) post(ctx context.Context, path, carrierKey string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+path, rd)
	if err != nil {
		return nil, fmt.Errorf("carrier: build request: %w", err)
	}
	c.setHeaders(httpReq)
	httpReq.Header.Set("Idempotency-Key", carrierKey)
	if body != nil {
		httpReq.Header.Set("Content-Type", "application/json")
	}
	httpReq.Header.Set("Accept", "application/json")
	resp, err := c.httpClient.Do(httpReq)
	if err != nil {
		return nil, &UnknownOutcomeError{Err: unwrapURLError(err)}
	}
	return resp, nil
}

// decodeOK decodes the body of a 200 or 201 into v, what naming it in errors:
// a body we cannot read or decode leaves the outcome unknown.
func decodeOK(status int, body []byte, readErr error, what string, v any) error {
	if readErr != nil {
		return &UnknownOutcomeError{Status: status, Err: fmt.Errorf("read %s: %w", what, readErr)}
	}
	if len(body) > maxLabelBody {
		return &UnknownOutcomeError{Status: status, Err: fmt.Errorf("%s body over %d bytes", what, maxLabelBody)}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &UnknownOutcomeError{Status: status, Err: fmt.Errorf("decode %s: %w", what, err)}
	}
	return nil
}

// readPurchase classifies one answer to POST /v1/labels.
func readPurchase(resp *http.Response, now time.Time) (*Label, error) {
	status := resp.StatusCode
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxLabelBody+1))
	retryAfter := parseRetryAfter(resp.Header.Get("Retry-After"), now)

	switch {
	case status == http.StatusOK || status == http.StatusCreated:
		var label Label
		if err := decodeOK(status, body, readErr, "label", &label); err != nil {
			return nil, err
		}
		if missing := label.missingFields(); missing != "" {
			return nil, &UnknownOutcomeError{Status: status, Err: fmt.Errorf("label without %s", missing)}
		}
		label.Replayed = status == http.StatusOK
		if err := CheckStatus(&label); err != nil {
			return nil, err
		}
		return &label, nil

	default:
		return nil, failure(status, body, retryAfter, "")
	}
}

// failure is the error for an answer that is not a success, as the protocol's
// table says: a [*RejectedError] for 400, 404 and 422 (op is its Op), and for
// a 409 whose code is one of finalConflicts; an [*InProgressError] for any
// other 409; an [*UnknownOutcomeError] for 408, 429, 5xx and anything the
// protocol does not name.
func failure(status int, body []byte, retryAfter time.Duration, op string, finalConflicts ...string) error {
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity:
		// The status alone is final; a body we cannot read only costs us the
		// carrier's wording.
		code, msg := problem(status, body)
		return &RejectedError{Status: status, Code: code, Message: msg, Op: op}

	case http.StatusConflict:
		code, msg := problem(status, body)
		if slices.Contains(finalConflicts, code) {
			return &RejectedError{Status: status, Code: code, Message: msg, Op: op}
		}
		return &InProgressError{Status: status, Code: code, Message: msg, RetryAfter: retryAfter}

	default:
		return &UnknownOutcomeError{
			Status:     status,
			Err:        fmt.Errorf("carrier answered %d %s: %s", status, http.StatusText(status), snippet(body)),
			RetryAfter: retryAfter,
		}
	}
}

// StatusActive is the status of a live label; a label without a status is live too.
const StatusActive = "active"

// CodeLabelVoided is the code of the [*RejectedError] for a purchase
// answered with a voided label.
const CodeLabelVoided = "label_voided"

// CheckStatus returns nil for a live label, and for a voided one the
// [*RejectedError] (code [CodeLabelVoided], the status the carrier answered)
// that [Client.Buy] returns instead of it: a voided label ships nothing, and
// the key that bought it will always name it, so retrying cannot help. A
// status the protocol does not name is an [*UnknownOutcomeError]: a label
// we cannot tell live is not handed out.
func CheckStatus(l *Label) error {
	status := http.StatusCreated
	if l.Replayed {
		status = http.StatusOK
	}
	switch l.Status {
	case "", StatusActive:
		return nil
	case StatusVoided:
		when := "at a time it did not say"
		if l.VoidedAt != nil {
			when = "at " + l.VoidedAt.UTC().Format(time.RFC3339)
		}
		return &RejectedError{Status: status, Code: CodeLabelVoided,
			Message: fmt.Sprintf("the carrier voided %s, the label this key bought, %s", l.CarrierLabelID, when)}
	default:
		return &UnknownOutcomeError{Status: status, Err: fmt.Errorf("label %s with status %q", l.CarrierLabelID, snippet([]byte(l.Status)))}
	}
}

func (l *Label) missingFields() string {
	var missing []string
	if l.CarrierLabelID == "" {
		missing = append(missing, "carrier_label_id")
	}
	if l.TrackingNo == "" {
		missing = append(missing, "tracking_no")
	}
	if l.Currency == "" {
		missing = append(missing, "currency")
	}
	if l.PurchasedAt.IsZero() {
		missing = append(missing, "purchased_at")
	}
	return strings.Join(missing, ", ")
}

// problem reads the carrier's {"code","message"} body; when the body has another
// shape the code is "unknown" and the message is what the body said.
func problem(status int, body []byte) (code, message string) {
	var p struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &p); err == nil && p.Code != "" {
		return p.Code, p.Message
	}
	if s := snippet(body); s != "" {
		return "unknown", s
	}
	return "unknown", http.StatusText(status)
}

// snippet keeps an unexpected body readable in an error message without letting
// a large or binary body flood the logs.
func snippet(body []byte) string {
	const max = 200
	s := strings.TrimSpace(string(body))
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%d bytes, not UTF-8", len(body))
	}
	if len(s) > max {
		s = s[:max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

// unwrapURLError drops the *url.Error wrapper, whose message repeats the method
// and URL; the cause stays reachable with errors.Is.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, ue.URL, ue.Err)
	}
	return err
}

// Invoice fetches the carrier's bill for the calendar date of day (read in day's
// own location), as the CSV bytes the carrier sent. Any answer but 200 is an
// error: a [*RejectedError] for 400/404/422, else an [*UnknownOutcomeError].
func (c *Client) Invoice(ctx context.Context, day time.Time) ([]byte, error) {
	u := c.baseURL + "/v1/invoices?date=" + url.QueryEscape(day.Format(time.DateOnly))
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("carrier: build request: %w", err)
	}
	c.setHeaders(httpReq)
	httpReq.Header.Set("Accept", "text/csv")

	resp, err := c.httpClient.Do(httpReq)
	if err != nil {
		return nil, &UnknownOutcomeError{Err: unwrapURLError(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		switch resp.StatusCode {
		case http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity:
			code, msg := problem(resp.StatusCode, body)
			return nil, &RejectedError{Status: resp.StatusCode, Code: code, Message: msg}
		}
		return nil, &UnknownOutcomeError{
			Status:     resp.StatusCode,
			Err:        fmt.Errorf("invoice: carrier answered %d %s: %s", resp.StatusCode, http.StatusText(resp.StatusCode), snippet(body)),
			RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		}
	}
	// No size limit: a day's invoice is as large as the day's business. A
	// truncated body fails here (unexpected EOF) rather than as a short file.
	csv, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, &UnknownOutcomeError{Status: resp.StatusCode, Err: fmt.Errorf("read invoice: %w", err)}
	}
	return csv, nil
}

func (c *Client) setHeaders(r *http.Request) {
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	r.Header.Set("User-Agent", "labelkit-carrier-client/1")
}
