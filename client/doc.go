// Package client is the Go SDK for the label service's HTTP API (docs/api.md).
// It is a module of its own, github.com/labelkit/labels/client, that needs
// only the standard library and Go 1.22; its versions are the repository's
// tags that prefix the version with the folder, as Go requires for a nested
// module ("go get github.com/labelkit/labels/client@latest").
// The wire types ([Parcel], [Label], [LabelRequest], [Problem]) are its own.
//
// It exists so that a caller gets idempotency right without thinking about it:
// the seed's first failure is a client that mints a new key on every retry
// attempt, and each such attempt looks like a new request, so a retried
// timeout buys a second label.
//
// # One key per intent
//
// [Client.CreateLabel] asks for one label for one parcel. It names the intent
// with a key derived from the parcel's identity, "label:{order}:{parcel}:v{version}"
// ([DeriveKey]), unless the caller passes one with [WithKey], and sends that
// same key on every attempt. A derived key needs no storage: a caller that
// restarts in the middle of its retries derives the same key again, and its
// next call is answered from what the service already did. A reprint is a new
// label_version and so a new key. The key is sent in the IETF draft's
// Structured-Field string form ("label:918273:1:v1"); a key the API would
// refuse is never sent ([ErrInvalidKey]).
//
// # Retries
//
// An attempt that ends without an answer (a refused or reset connection, a
// lost reply, the attempt's timeout) and the answers the API defines as
// transient are retried with the same key and body:
//
//   - network errors and timeouts;
//   - 409 request_in_progress (another attempt with the key is being accepted);
//   - 408 and 429;
//   - 503 (store_unavailable, or a proxy's), and every other 5xx except a 502
//     whose problem code is carrier_unavailable.
//
// Delays grow exponentially with full jitter (before retry n, a uniform draw
// between zero and min(max, base·2ⁿ⁻¹); see [WithBackoff]), and are never
// shorter than the answer's Retry-After.
// Retrying stops after [WithMaxAttempts] attempts or [WithMaxElapsed] of
// retrying, whichever comes first, and never outlives the caller's context.
//
// Everything else is final and returned at once: 400, 401, 404, 413,
// 422 idempotency_key_reused, 409 parcel_already_labelled, and the saved
// outcomes of the intent, 422 carrier_rejected and 502 carrier_unavailable.
// A saved 502 is not a transient 5xx: the service tried the carrier through
// all of its own retries and saved the failure under the key, so a repeat with
// the same key gets the same 502 back. Trying again needs a new key.
//
// # Waiting for the outcome
//
// The API buys labels asynchronously: a new request is answered 202 and the
// purchase runs on a worker. Every POST asks to wait for the outcome with
// RFC 7240's "Prefer: wait=N" ([WithWait], 10 s by default, shortened to fit the
// context's deadline), which usually returns the label in the same round trip.
// If the answer is still 202 (the wait ran out, or the API held as many
// waiting requests as it may and answered at once, with Retry-After the wait
// asked), the client polls GET /v1/label-requests/{id}, no more often than
// its Retry-After says, for at most [WithMaxWait]. An
// intent still pending then is returned as a [*PendingError]: it will be
// carried out, and calling CreateLabel again with the same parcel (the same
// key) picks up its outcome.
//
// # Errors
//
// CreateLabel returns a label or one of these:
//
//   - [*RejectedError] ([ErrRejected]): the carrier refused the parcel for good,
//     with its own code and message; fix the parcel and use a new key.
//   - [*UnavailableError] ([ErrUnavailable]): with Final set, the saved 502
//     carrier_unavailable; otherwise the client ran out of attempts or time on
//     transient failures and the outcome is unknown.
//   - [*PendingError] ([ErrPending]): accepted and still being carried out.
//   - [*ProblemError]: any other answer of the API, matching [ErrKeyReused],
//     [ErrParcelAlreadyLabelled], [ErrInvalidRequest], [ErrUnauthenticated]
//     or [ErrNotFound] with errors.Is.
//   - [ErrInvalidKey] when a key given with [WithKey] cannot be sent, or a
//     wrapped context error when the caller's context ends first.
//
// [IsTemporary] tells the errors after which calling again later with the same
// parcel and key is the right thing to do.
//
// A [*ProblemError] carries the problem document (with every invalid field of
// a 400 in Problem.Errors, and in its error text) and the answer's
// X-Request-Id (HTTPRequestID), the id the service logged the request under.
//
// # Reading
//
// [Client.GetLabel] reads a label by id, with the printable document the
// carrier named (Label.Document: its media type and size), and
// [Client.LabelDocument] fetches that document through the API with the
// caller's token (a 502 carrier_unavailable there is transient, and retried).
// [Client.GetLabelRequest] reads a label request by id and [Client.FindByKey]
// by idempotency key, without waiting: pending, or final with the label or
// the saved problem. Reads change nothing, so they retry what is transient
// within the same bounds as CreateLabel; a label or request that is not the
// caller's is a [*ProblemError] matching [ErrNotFound].
package client
