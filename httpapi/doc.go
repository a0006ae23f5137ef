// Package httpapi serves the label service's HTTP API (api.md): routes.go
// lists every route, each handler is a small maker that asks for what it needs,
// problem.go maps every error to one problem+json answer, and wait.go holds
// the requests that wait for their outcome (Prefer: wait), at most
// Deps.MaxWaiters, woken by the completion's notification.
//
// POST /v1/labels is the accept: it validates the request and hands it to
// package accept, which fingerprints it (package idempotency) and, in one
// transaction shared with concurrent accepts (postgres.Accept), writes the key
// record, the label intent and its row of the relay's queue, or answers from
// what is already there. It never calls the carrier; the worker does. With a [RateLimit], a
// caller's creates past its rate are answered 429 before anything is read.
package httpapi
