package carrier

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// RejectedError is the carrier refusing a purchase for good (400, 404, 422): a
// bad address, a service it does not offer; or answering it with a label it
// has voided (code [CodeLabelVoided]). Retrying cannot help.
type RejectedError struct {
	// Status is the HTTP status the carrier answered.
	Status int
	// Code is the carrier's machine-readable code, "unknown" when the body did
	// not carry one.
	Code string
	// Message is the carrier's human-readable reason.
	Message string
	// Op is what was refused: empty for a purchase, "void" for a void.
	Op string
}

func (e *RejectedError) Error() string {
	what := "purchase"
	if e.Op != "" {
		what = e.Op
	}
	return fmt.Sprintf("carrier rejected the %s (%d %s): %s", what, e.Status, e.Code, e.Message)
}

// InProgressError is the carrier answering 409: it is still working on this key.
// Retry later with the same key.
type InProgressError struct {
	// Status is the HTTP status the carrier answered (409).
	Status int
	// Code is the carrier's code, "unknown" when the body did not carry one.
	Code string
	// Message is the carrier's human-readable reason.
	Message string
	// RetryAfter is the carrier's Retry-After, zero when it sent none.
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("carrier is still working on this key (%d %s): %s", e.Status, e.Code, e.Message)
}

// UnknownOutcomeError means the label may or may not have been bought: the
// carrier failed, timed out, dropped the connection, or answered something we
// cannot read. Retry later with the same key; only that key finds the label again
// if it was bought.
type UnknownOutcomeError struct {
	// Status is the HTTP status the carrier answered, 0 when no answer arrived.
	Status int
	// Err is what went wrong.
	Err error
	// RetryAfter is the carrier's Retry-After, zero when it sent none.
	RetryAfter time.Duration
}

func (e *UnknownOutcomeError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("carrier outcome unknown: %v", e.Err)
	}
	return fmt.Sprintf("carrier outcome unknown (status %d): %v", e.Status, e.Err)
}

func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// IsRejected returns the carrier's permanent refusal inside err, if there is one.
func IsRejected(err error) (*RejectedError, bool) {
	var rej *RejectedError
	if errors.As(err, &rej) {
		return rej, true
	}
	return nil, false
}

// IsRetryable reports whether trying again later with the same key can change
// the outcome: true for [*InProgressError] and [*UnknownOutcomeError], and for a
// bare context error (the purchase may have happened before the caller gave up);
// false for [*RejectedError], an invalid key, and nil.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := IsRejected(err); ok {
		return false
	}
	var inProgress *InProgressError
	var unknown *UnknownOutcomeError
	return errors.As(err, &inProgress) || errors.As(err, &unknown) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// parseRetryAfter reads a Retry-After header, in seconds or as an HTTP date;
// zero when absent, malformed or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 || secs > math.MaxInt64/int64(time.Second) {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// IsLabelVoided reports whether err is a purchase answered with a label the
// carrier has voided (see [CheckStatus]).
func IsLabelVoided(err error) bool {
	rej, ok := IsRejected(err)
	return ok && rej.Op == "" && rej.Code == CodeLabelVoided
}
