package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, for errors.Is.
var (
	// ErrKeyReused: the key was used before with a different request. A bug
	// of the caller; never retry it blindly.
	ErrKeyReused = errors.New("idempotency key reused with a different request")
	// ErrParcelAlreadyLabelled: the parcel and version have a label request
	// under another key with a different request. A reprint needs a new
	// label_version.
	ErrParcelAlreadyLabelled = errors.New("parcel already labelled")
	// ErrInvalidRequest: the API refused the request as malformed (400, 413).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnauthenticated: the token is missing or unknown.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrNotFound: no such resource for this caller.
	ErrNotFound = errors.New("not found")
	// ErrRejected: the carrier rejected the parcel for good (see [RejectedError]).
	ErrRejected = errors.New("rejected by the carrier")
	// ErrUnavailable: no label could be had (see [UnavailableError]).
	ErrUnavailable = errors.New("unavailable")
	// ErrPending: the request was accepted and is still being carried out.
	ErrPending = errors.New("label request still pending")
	// ErrInvalidKey: a key given with [WithKey] is not 1 to 255 visible ASCII
	// characters. Nothing was sent.
	ErrInvalidKey = errors.New("invalid idempotency key")
)

// ProblemError is a final answer of the API that is neither a label nor one
// of the outcomes with their own type: a problem document (RFC 9457).
type ProblemError struct {
	// Key is the idempotency key the request was sent with.
	Key string
	// RequestID is the label request the answer names (the Location of a
	// 409 parcel_already_labelled), if any.
	RequestID string
	// Replayed is true when the answer carried Idempotent-Replayed: true.
	Replayed bool
	// Problem is the problem document; Status is always set, Code when the
	// answer was a problem document of the API.
	Problem Problem
	// HTTPRequestID is the answer's X-Request-Id: the id under which the
	// service logged the request (http_request_id), to quote when asking
	// its operators. Empty when the answer had none.
	HTTPRequestID string
}

// Error implements error. It names the key (for a create), the status, the
// code and the detail, every invalid field with its message, and the
// X-Request-Id, e.g.
//
//	labels: key "label:1:1:v1": 400 invalid_request: the request body is invalid: see errors: weight_g: must be an integer from 1 to 70000 (X-Request-Id 01JF…)
func (e *ProblemError) Error() string {
	var b strings.Builder
	b.WriteString("labels: ")
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	fmt.Fprintf(&b, "%d", e.Problem.Status)
	if e.Problem.Code != "" {
		b.WriteString(" " + e.Problem.Code)
	}
	switch {
	case e.Problem.Detail != "":
		b.WriteString(": " + e.Problem.Detail)
	case e.Problem.Title != "":
		b.WriteString(": " + e.Problem.Title)
	}
	for i, fe := range e.Problem.Errors {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		field := fe.Field
		if field == "" {
			field = "body"
		}
		b.WriteString(sep + field + ": " + fe.Message)
	}
	if e.HTTPRequestID != "" {
		b.WriteString(" (X-Request-Id " + e.HTTPRequestID + ")")
	}
	return b.String()
}

// Is matches the sentinel of the problem's code.
func (e *ProblemError) Is(target error) bool {
	switch target {
	case ErrKeyReused:
		return e.Problem.Code == CodeIdempotencyKeyReused
	case ErrParcelAlreadyLabelled:
		return e.Problem.Code == CodeParcelAlreadyLabelled
	case ErrInvalidRequest:
		switch e.Problem.Code {
		case CodeInvalidRequest, CodeIdempotencyKeyMissing, CodeIdempotencyKeyInvalid,
			CodePayloadTooLarge, CodeUnsupportedMediaType:
			return true
		}
	case ErrUnauthenticated:
		return e.Problem.Code == CodeUnauthenticated
	case ErrNotFound:
		return e.Problem.Code == CodeNotFound
	}
	return false
}

// RejectedError is the saved outcome 422 carrier_rejected: the carrier refused
// the parcel for good. The same key always answers the same; fix the parcel
// and ask again under a new key.
type RejectedError struct {
	Key       string
	RequestID string
	// CarrierCode and CarrierMessage are the carrier's own reason, e.g.
	// "address_invalid".
	CarrierCode    string
	CarrierMessage string
	Problem        Problem
}

// Error implements error.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("labels: key %q: rejected by the carrier: %s: %s", e.Key, e.CarrierCode, e.CarrierMessage)
}

// Is matches [ErrRejected].
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// UnavailableError says no label could be had, in one of two ways that call
// for different reactions:
//
//   - Final: the saved outcome 502 carrier_unavailable. The service tried the
//     carrier through all of its own retries and gave up; the same key always
//     answers this. Trying again needs a new key.
//   - not Final: the client ran out of attempts or time while the API or the
//     network kept failing. The outcome is unknown (the request may have been
//     accepted); call again later with the same key.
type UnavailableError struct {
	Key       string
	RequestID string // when known
	Final     bool
	// Attempts is the number of POST attempts made.
	Attempts int
	// Problem is the saved problem when Final, else the last problem answer
	// seen, if any.
	Problem *Problem
	// Err is the last failure seen when not Final.
	Err error
}

// Error implements error.
func (e *UnavailableError) Error() string {
	if e.Final {
		detail := ""
		if e.Problem != nil {
			detail = ": " + e.Problem.Detail
		}
		return fmt.Sprintf("labels: key %q: carrier unavailable (saved outcome)%s", e.Key, detail)
	}
	return fmt.Sprintf("labels: key %q: unavailable after %d attempts, outcome unknown: %v", e.Key, e.Attempts, e.Err)
}

// Is matches [ErrUnavailable].
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the last failure.
func (e *UnavailableError) Unwrap() error { return e.Err }

// PendingError says the request was accepted and is still being carried out
// when the client stopped waiting. It will be carried out: calling CreateLabel
// again with the same parcel and key returns its outcome.
type PendingError struct {
	Key       string
	RequestID string
}

// Error implements error.
func (e *PendingError) Error() string {
	return fmt.Sprintf("labels: key %q: label request %s still pending", e.Key, e.RequestID)
}

// Is matches [ErrPending].
func (e *PendingError) Is(target error) bool { return target == ErrPending }

// IsTemporary reports whether calling CreateLabel again later with the same
// parcel and key may still bring the label: the request is pending, or its
// outcome is unknown because the API, the network or the caller's own
// deadline cut it short. Final outcomes (a rejection, a saved
// carrier_unavailable, a reused key…) are not temporary.
func IsTemporary(err error) bool {
	var u *UnavailableError
	switch {
	case err == nil:
		return false
	case errors.As(err, &u):
		return !u.Final
	case errors.Is(err, ErrPending):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return true
	}
	return false
}
