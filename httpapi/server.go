package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/postgres"
)

// Deps are what the API needs.
type Deps struct {
	// Opts are the accept's: the pool and the notifier, which wakes the
	// relays after an accept (nil: they poll); KeyRetention, which also
	// sets Idempotency-Key-Expires of a key not yet final to now plus it;
	// Timeout, which bounds the database work of every request too;
	// ClaimWait, the wait for a concurrent request with the same key before
	// 409; Batch, the accepts per shared transaction (negative: each its
	// own, as when BeforeCommitFunc, a fault-injection hook, is set).
	accept.Opts
	Listener *notify.Listener // wakes Prefer: wait; nil means the sweep alone (WaitSweep)
	Metrics  *metrics.Metrics
	// MetricsElsewhere leaves GET /metrics out of the API's routes (a 404
	// like any unknown path): the registry is served on another listener
	// (API_METRICS_ADDR).
	MetricsElsewhere bool
	Log              zerolog.Logger
	// OpenAPI is served at /openapi.yaml when set.
	OpenAPI []byte
	// RateLimit limits each caller's creates in this process (the zero
	// value: no limit, [DefaultRateLimit]).
	RateLimit RateLimit
	// MaxWaiters bounds the Prefer: wait requests held at once
	// (PREFER_WAIT_MAX, wait.go); past it a request is answered at once, as
	// without the preference, with Retry-After the wait it asked for. 0
	// means DefaultMaxWaiters; a negative value holds none.
	MaxWaiters int
	// WaitSweep is how often the intents of all held requests are read
	// again, in one query, for a completion whose notification was missed
	// (the only wake-up without a Listener); 0 means DefaultWaitSweep.
	WaitSweep time.Duration
	// WaitSweepTicks, when set, replaces WaitSweep's ticker, and WaitAfter
	// time.After as a held request's deadline: for tests, which drive both.
	WaitSweepTicks <-chan time.Time
	WaitAfter      func(time.Duration) <-chan time.Time
	// Carrier serves the label documents of GET
	// /v1/labels/{label_id}/document (CARRIER_URL, CARRIER_TOKEN), each
	// fetch bounded by CarrierTimeout (0: carrier.DefaultTimeout). Nil: that
	// endpoint answers 502 carrier_unavailable.
	Carrier        *carrier.Client
	CarrierTimeout time.Duration
	// Ready answers /readyz: nil when the requests can be served (nil
	// Ready: a ping of the pool). A *migrations.BehindError is answered
	// with its message, which names `api migrate`.
	Ready func(context.Context) error
}

// Server is the HTTP API.
type Server struct {
	deps     Deps
	tokens   *tokenCache
	accepter *accept.Accepter
	limiter  *limiter // nil: no rate limit
	waiters  *waiters
}

// NewServer returns the API as an http.Handler.
func NewServer(deps Deps) http.Handler {
	if deps.Metrics == nil {
		deps.Metrics = metrics.New(metrics.API)
	}
	deps.Opts = deps.Opts.WithDefaults()
	if deps.CarrierTimeout <= 0 {
		deps.CarrierTimeout = carrier.DefaultTimeout
	}
	s := &Server{deps: deps, tokens: &tokenCache{ttl: time.Minute, m: map[string]tokenEntry{}}, limiter: newLimiter(deps.RateLimit), waiters: newWaiters(deps)}
	if deps.Listener != nil {
		deps.Listener.Watch(notify.ChannelFinal, s.waiters.notified)
	}
	s.accepter = accept.New(deps.Opts)
	return tracing.Handler(s.routes())
}

// reqInfo collects what the request log line and the metrics report.
type reqInfo struct {
	route     string
	httpID    string // X-Request-Id, the request's or a new one
	callerID  string
	key       string
	requestID string // the label request (intent)
	outcome   string
	err       error
	internal  bool
}

type ctxKey struct{}

func infoFrom(r *http.Request) *reqInfo {
	if i, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{}
}

// requestLog is the server's logger with the fields that follow an HTTP
// request on every line about it: http_request_id, and caller, key and
// request_id (the label request) as far as they are known yet (empty before).
// It is the one place the API adds per-request fields to its lines.
func (s *Server) requestLog(r *http.Request) zerolog.Logger {
	info := infoFrom(r)
	c := s.deps.Log.With().Str("http_request_id", info.httpID).Str("caller", info.callerID).
		Str("key", info.key).Str("request_id", info.requestID)
	if id := tracing.TraceID(r.Context()); id != "" {
		c = c.Str("trace_id", id)
	}
	return c.Logger()
}

func noteOutcome(r *http.Request, outcome string) {
	if i := infoFrom(r); i.outcome == "" {
		i.outcome = outcome
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// observe wraps a route: request id, recovery, one log line, metrics.
func (s *Server) observe(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := r.Header.Get("X-Request-Id")
		if !requestIDRE.MatchString(rid) {
			b := make([]byte, 8)
			_, _ = rand.Read(b)
			rid = hex.EncodeToString(b)
		}
		w.Header().Set("X-Request-Id", rid)
		info := &reqInfo{route: route, httpID: rid}
		if tracing.On() && r.Pattern != "" {
			trace.SpanFromContext(r.Context()).SetName(r.Pattern)
		}
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, info))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				info.internal = true
				info.err = errors.New("panic")
				log := s.requestLog(r)
				log.Error().Interface("panic", p).Msg("handler panicked")
				if sw.status == 0 {
					writeProblem(sw, r, labels.CodeInternal, "an internal error occurred")
				}
			}
			d := time.Since(start)
			s.deps.Metrics.HTTPRequests.WithLabelValues(route, r.Method, strconv.Itoa(sw.status)).Inc()
			s.deps.Metrics.HTTPDuration.WithLabelValues(route).Observe(d.Seconds())
			if route == "ops" {
				return // health probes and scrapes would drown the log
			}
			log := s.requestLog(r)
			ev := log.Info()
			if info.internal {
				ev = log.Error()
			} else if info.err != nil {
				ev = log.Warn()
			}
			ev.Str("method", r.Method).Str("route", route).Int("status", sw.status).Dur("duration_ms", d).
				Str("outcome", info.outcome).Err(info.err).Msg("request")
		}()
		h(sw, r)
	}
}

// authenticate answers 401 unless the request carries a known bearer token,
// and puts the caller into the request info. Nothing else is looked at first.
func (s *Server) authenticate(h func(w http.ResponseWriter, r *http.Request, callerID string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Values("Authorization")
		token, ok := "", len(auth) == 1
		if ok {
			scheme, rest, found := strings.Cut(auth[0], " ")
			token = strings.TrimSpace(rest)
			ok = found && strings.EqualFold(scheme, "Bearer") && token != "" && len(token) <= 512
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="labels"`)
			writeProblem(w, r, labels.CodeUnauthenticated, "a valid bearer token is required")
			return
		}
		id, cached := s.tokens.get(token)
		if !cached {
			ctx, cancel := context.WithTimeout(r.Context(), s.deps.Timeout)
			var err error
			id, err = postgres.Authenticate(ctx, s.deps.Pool, token)
			cancel()
			if errors.Is(err, postgres.ErrUnknownToken) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="labels", error="invalid_token"`)
				writeProblem(w, r, labels.CodeUnauthenticated, "a valid bearer token is required")
				return
			}
			if err != nil {
				writeError(w, r, err)
				return
			}
			s.tokens.put(token, id)
		}
		infoFrom(r).callerID = id
		h(w, r, id)
	}
}

// tokenCache keeps known tokens for a minute, so that authentication costs no
// query on the hot path; a revoked token stops working within that minute.
type tokenCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]tokenEntry
}

type tokenEntry struct {
	callerID string
	expires  time.Time
}

func (c *tokenCache) get(token string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[token]
	if !ok || time.Now().After(e.expires) {
		return "", false
	}
	return e.callerID, true
}

func (c *tokenCache) put(token, callerID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) > 10_000 {
		clear(c.m)
	}
	c.m[token] = tokenEntry{callerID: callerID, expires: time.Now().Add(c.ttl)}
}

// Limits of the HTTP server. The zero value gives the production defaults.
type Limits struct {
	ReadHeaderTimeout time.Duration // default 5s: a client that trickles headers is cut off
	ReadTimeout       time.Duration // default 15s: the whole request, body included
	WriteTimeout      time.Duration // default 45s: Prefer: wait holds an answer up to 30 s
	IdleTimeout       time.Duration // default 2m
	MaxHeaderBytes    int           // default 32 KiB
}

// NewHTTPServer returns an http.Server for h with the limits applied, so that
// no client can hold a connection or memory for long: the body is bounded by
// the handlers (64 KiB) and the JSON depth by the validator.
func NewHTTPServer(h http.Handler, l Limits) *http.Server {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 32 << 10
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: or(l.ReadHeaderTimeout, 5*time.Second),
		ReadTimeout:       or(l.ReadTimeout, 15*time.Second),
		WriteTimeout:      or(l.WriteTimeout, 45*time.Second),
		IdleTimeout:       or(l.IdleTimeout, 2*time.Minute),
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}
