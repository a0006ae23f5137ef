package carrier

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// VoidKeyPrefix starts every void key, so a void key seen in a log or at the
// carrier cannot be taken for a purchase key ([KeyPrefix]).
const VoidKeyPrefix = "void:"

// CodeVoidWindowClosed is the carrier's code for a label older than its void
// window (409).
const CodeVoidWindowClosed = "void_window_closed"

// StatusVoided is the status of a voided label.
const StatusVoided = "voided"

// DeriveVoidKey returns the Idempotency-Key of the void of one carrier label:
// "void:" + base64url-no-padding(SHA-256(carrierLabelID)). It depends on the
// label alone, so every run, every operator, every worker and every retry
// that voids the label sends the same key, and the carrier voids it once.
func DeriveVoidKey(carrierLabelID string) string {
	sum := sha256.Sum256([]byte(carrierLabelID))
	return VoidKeyPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// VoidedLabel is the carrier's answer to a void: the label, now voided. Its
// Status and VoidedAt are required here, so they are its own (they shadow
// the optional ones of [Label]).
type VoidedLabel struct {
	Label
	// Status is "voided".
	Status string `json:"status"`
	// VoidedAt is when the carrier voided the label (the first void, for a replay).
	VoidedAt time.Time `json:"voided_at"`
}

// Void voids the label carrierLabelID under carrierKey (see [DeriveVoidKey]).
// The errors are those of [Client.Buy]:
//
//   - a [*RejectedError] for 400, 404 (no such label: Status 404), 422, and
//     for 409 with the code [CodeVoidWindowClosed] (the label is older than
//     the carrier's void window): final, retrying cannot help;
//   - an [*InProgressError] for any other 409: the carrier is still working on
//     this key;
//   - an [*UnknownOutcomeError] for 408, 429, 5xx, any other status, a timeout,
//     a reset or refused connection, an unreadable 200: the label may or may
//     not be voided, so the only safe move is to try again with the same key;
//   - before anything is sent, a wrapped [ErrInvalidKey], or an error for an
//     empty carrierLabelID.
//
// A 200 with Idempotent-Replayed: true (the label was voided before) is a
// [VoidedLabel] with Replayed set.
func (c *Client) Void(ctx context.Context, carrierKey, carrierLabelID string) (*VoidedLabel, error) {
	if err := ValidateKey(carrierKey); err != nil {
		return nil, err
	}
	if carrierLabelID == "" {
		return nil, errors.New("carrier: void: empty carrier label id")
	}
	resp, err := c.post(ctx, "/v1/labels/"+url.PathEscape(carrierLabelID)+"/void", carrierKey, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readVoid(resp, time.Now())
}

// readVoid classifies one answer to POST /v1/labels/{id}/void.
func readVoid(resp *http.Response, now time.Time) (*VoidedLabel, error) {
	status := resp.StatusCode
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxLabelBody+1))
	retryAfter := parseRetryAfter(resp.Header.Get("Retry-After"), now)

	switch {
	case status == http.StatusOK:
		var v VoidedLabel
		if err := decodeOK(status, body, readErr, "voided label", &v); err != nil {
			return nil, err
		}
		var missing []string
		if v.CarrierLabelID == "" {
			missing = append(missing, "carrier_label_id")
		}
		if v.Status != StatusVoided {
			missing = append(missing, `status "voided"`)
		}
		if v.VoidedAt.IsZero() {
			missing = append(missing, "voided_at")
		}
		if len(missing) > 0 {
			return nil, &UnknownOutcomeError{Status: status, Err: fmt.Errorf("voided label without %s", strings.Join(missing, ", "))}
		}
		v.Replayed = strings.EqualFold(resp.Header.Get("Idempotent-Replayed"), "true")
		return &v, nil

	default:
		return nil, failure(status, body, retryAfter, "void", CodeVoidWindowClosed)
	}
}

// IsVoidWindowClosed reports whether err is the carrier refusing a void
// because the label is older than its void window.
func IsVoidWindowClosed(err error) bool {
	rej, ok := IsRejected(err)
	return ok && rej.Status == http.StatusConflict && rej.Code == CodeVoidWindowClosed
}

// IsNotFound reports whether err is the carrier answering 404: no such label.
func IsNotFound(err error) bool {
	rej, ok := IsRejected(err)
	return ok && rej.Status == http.StatusNotFound
}
