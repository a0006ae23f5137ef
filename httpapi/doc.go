// Package httpapi serves the label service's HTTP API (docs/api.md).
// [NewServer] builds the handler from its [Deps]; [NewHTTPServer] puts it in
// an http.Server with the [Limits] that keep a slow or large client from
// holding a connection or memory for long.
//
// routes.go lists every route. Each but /metrics is wrapped in observe
// (request id, recovery, one log line, metrics), and the caller's routes,
// the create and the reads, in authenticate (401 unless the bearer token
// names a caller; nothing else is looked at first), which hands the caller
// to the handler. labels.go is the create, requests.go the reads and the
// health checks. validate.go parses a create's body strictly into a
// labels.Parcel, with every field error at once; problem.go maps every error
// to one problem+json answer; wait.go holds the requests that wait for their
// outcome (Prefer: wait), at most Deps.MaxWaiters, woken by the completion's
// notification or by the sweep that reads every held request's intent again.
//
// POST /v1/labels is the accept: it validates the request and hands it to
// package accept, which fingerprints it (package idempotency) and, in one
// transaction shared with concurrent accepts (postgres.Accept), writes the key
// record, the label intent and its row of the relay's queue, or answers from
// what is already there. It never calls the carrier; the worker does. With a
// [RateLimit], a caller's creates past its rate are answered 429 before
// anything is read.
package httpapi
