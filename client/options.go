package client

import (
	"net/http"
	"time"
)

// Defaults of a [Client]. With them a CreateLabel that meets nothing but
// transient failures gives up after 8 attempts or a minute of retrying, and an
// accepted request is waited for up to two minutes.
const (
	DefaultMaxAttempts    = 8
	DefaultMaxElapsed     = time.Minute
	DefaultBackoffBase    = 250 * time.Millisecond
	DefaultBackoffMax     = 10 * time.Second
	DefaultWait           = 10 * time.Second
	DefaultMaxWait        = 2 * time.Minute
	DefaultPollInterval   = time.Second
	DefaultAttemptTimeout = 30 * time.Second
)

// Option configures a [Client].
type Option func(*Client)

// WithHTTPClient makes the calls with hc instead of a default client. Leave
// hc.Timeout zero: each attempt is bounded by [WithAttemptTimeout] instead,
// which leaves room for Prefer: wait.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.httpClient = hc }
}

// WithMaxAttempts bounds the POST attempts of one CreateLabel (default
// [DefaultMaxAttempts]). 1 disables retries.
func WithMaxAttempts(n int) Option {
	return func(c *Client) { c.maxAttempts = max(n, 1) }
}

// WithMaxElapsed bounds how long one CreateLabel keeps retrying the POST
// (default [DefaultMaxElapsed]): a retry whose delay would end later is not made.
func WithMaxElapsed(d time.Duration) Option {
	return func(c *Client) { c.maxElapsed = d }
}

// WithBackoff sets the exponential backoff between attempts: the n-th retry
// waits a uniformly random time between zero and min(max, base·2ⁿ⁻¹), and at
// least the answer's Retry-After (defaults [DefaultBackoffBase],
// [DefaultBackoffMax]).
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) { c.backoffBase, c.backoffMax = base, max }
}

// WithWait sets how long each POST asks the API to hold its answer for the
// outcome ("Prefer: wait=N", whole seconds, at most 30; default
// [DefaultWait]). Zero sends no preference: the answer is 202 at once and the
// client polls.
func WithWait(d time.Duration) Option {
	return func(c *Client) { c.wait = d }
}

// WithMaxWait bounds how long CreateLabel polls an accepted request for its
// outcome (default [DefaultMaxWait]) before it returns a [*PendingError].
func WithMaxWait(d time.Duration) Option {
	return func(c *Client) { c.maxWait = d }
}

// WithPollInterval sets the shortest time between two polls of a pending
// request (default [DefaultPollInterval]); a longer Retry-After wins.
func WithPollInterval(d time.Duration) Option {
	return func(c *Client) { c.pollInterval = d }
}

// WithAttemptTimeout bounds one HTTP exchange (default
// [DefaultAttemptTimeout]); a POST gets its Prefer: wait on top. An attempt
// that times out is retried with the same key, like a lost reply.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *Client) { c.attemptTimeout = d }
}

// CreateOption configures one [Client.CreateLabel].
type CreateOption func(*createOpts)

type createOpts struct {
	key string
}

// WithKey sends key instead of the key derived from the parcel ([DeriveKey]).
// The caller must make it once per intent and keep it (saved with the parcel)
// for every later call about the same intent.
func WithKey(key string) CreateOption {
	return func(o *createOpts) { o.key = key }
}
