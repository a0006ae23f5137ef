package stacktest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/apiserve"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/worker"
)

// SimOpts tunes a stack that buys from the carrier simulator.
type SimOpts struct {
	Sim            sim.Options   // the carrier's misbehaviour
	NoWorker       bool          // API only: intents stay pending
	LeaseDuration  time.Duration // default worker.DefaultLeaseDuration
	CarrierTimeout time.Duration // default 5s
	MaxAttempts    int           // carrier attempts before the saved 502; default 5
	RetryBase      time.Duration // default 10ms
	// Downtime is how long a restart of the API refuses connections; default 100ms.
	Downtime time.Duration
	// OpenAPI is served at /openapi.yaml when set.
	OpenAPI []byte
	// AfterVoidFunc runs between the carrier's answer to a void and its
	// record (worker.Config.AfterVoidFunc): an error is a crash there.
	AfterVoidFunc func(ctx context.Context, carrierLabelID string) error
	// Webhooks configures the webhook delivery, as [Opts.Webhooks] does.
	Webhooks jobs.WebhookConfig
}

// SimStack is the whole pipeline as a caller meets it: the API behind a
// [Faults] front (failed answers, lost replies, restarts), the relay, and
// River workers that buy over HTTP from a [sim.Server] with the real carrier
// client.
type SimStack struct {
	T      testing.TB
	Pool   *pgxpool.Pool
	URL    string // the API's base URL, the same across restarts
	Faults *Faults
	Sim    *sim.Server
	// CarrierURL is the simulator's base URL, for processes of the test's own.
	CarrierURL string
	Metrics    *metrics.Metrics

	newAPI   func() http.Handler
	simHTTP  *httptest.Server
	downtime time.Duration

	mu       sync.Mutex
	addr     string
	srv      *http.Server
	restarts int
	closed   bool
	worker   *worker.Worker
}

// NewSim starts a stack that buys from the simulator; everything stops when
// the test ends.
func NewSim(t testing.TB, o SimOpts) *SimStack {
	t.Helper()
	defaults(&o.LeaseDuration, &o.CarrierTimeout, &o.MaxAttempts, &o.RetryBase)
	webhookDefaults(&o.Webhooks)
	if o.Downtime == 0 {
		o.Downtime = 100 * time.Millisecond
	}
	pool, _ := dbtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	m := metrics.New(metrics.API, metrics.Worker)

	simOpts := o.Sim
	carrierSim, err := sim.New(&simOpts)
	require.NoError(t, err)
	simHTTP := httptest.NewServer(carrierSim)

	// The API's listener also wakes the worker's relay.
	svc := apiserve.New(ctx, apiserve.Config{Listen: pool.Config().ConnConfig.Copy(), Channels: []string{notify.ChannelIntents, notify.ChannelWebhookEvents},
		Deps: httpapi.Deps{Opts: accept.Opts{Pool: pool}, Metrics: m, Log: log, OpenAPI: o.OpenAPI,
			Carrier: carrier.NewClient(simHTTP.URL, nil), CarrierTimeout: o.CarrierTimeout}})
	listener := svc.Listener

	s := &SimStack{T: t, Pool: pool, Sim: carrierSim, CarrierURL: simHTTP.URL, Metrics: m, downtime: o.Downtime, simHTTP: simHTTP}
	s.newAPI = svc.NewHandler
	s.Faults = &Faults{RetryAfter: "0", next: svc.Handler, restart: s.Restart}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.addr = ln.Addr().String()
	s.URL = "http://" + s.addr
	s.serve(ln)

	if !o.NoWorker {
		s.worker = startWorker(t, ctx, worker.Config{
			Pool: pool, Carrier: carrier.NewClient(simHTTP.URL, nil), CarrierTimeout: o.CarrierTimeout,
			LeaseDuration: o.LeaseDuration, MaxAttempts: o.MaxAttempts, RetryBase: o.RetryBase,
			Metrics: m, Log: log, Listener: listener, AfterVoidFunc: o.AfterVoidFunc,
			Webhooks: o.Webhooks,
		})
	}
	t.Cleanup(func() {
		s.mu.Lock()
		s.closed = true
		_ = s.srv.Close()
		s.mu.Unlock()
		s.StopWorker()
		cancel()
		svc.Close()
		_ = carrierSim.Close()
		simHTTP.Close()
	})
	return s
}

// StopCarrier closes the simulator's HTTP server: every later carrier call,
// the API's and the worker's, finds its connection refused.
func (s *SimStack) StopCarrier() { s.simHTTP.Close() }

// StopWorker stops the stack's in-process worker (waiting for its jobs), so
// that a test's own worker processes take what follows. It is safe to call
// more than once.
func (s *SimStack) StopWorker() {
	s.mu.Lock()
	w := s.worker
	s.worker = nil
	s.mu.Unlock()
	if w == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = w.Stop(ctx)
}

// serve starts an API server on ln. Callers hold s.mu or own s exclusively.
func (s *SimStack) serve(ln net.Listener) {
	s.srv = httpapi.NewHTTPServer(s.Faults, httpapi.Limits{})
	srv := s.srv
	go func() { _ = srv.Serve(ln) }()
}

// Restart does to the API what a crash and a restart of its process do: every
// connection is cut (requests in flight get no answer), new connections are
// refused for the stack's Downtime, and then a fresh API (a new
// [httpapi.NewServer], so nothing cached survives) serves the same address.
// The database, the workers and the carrier go on.
func (s *SimStack) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	_ = s.srv.Close()
	time.Sleep(s.downtime)
	s.Faults.mu.Lock()
	s.Faults.next = s.newAPI()
	s.Faults.mu.Unlock()
	ln, err := net.Listen("tcp", s.addr)
	require.NoError(s.T, err, "listening again on %s", s.addr)
	s.serve(ln)
	s.restarts++
}

// Restarts returns how many times the API was restarted.
func (s *SimStack) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Token creates a caller and returns a bearer token of it.
func (s *SimStack) Token(name string) string {
	s.T.Helper()
	tok, err := postgres.AddCaller(context.Background(), s.Pool, name)
	require.NoError(s.T, err)
	return tok
}

// Purchases returns how many labels the simulator sold for the parcel.
func (s *SimStack) Purchases(orderID int64, parcelNo int) int {
	n := 0
	for _, p := range s.Sim.Purchases() {
		if p.OrderID == orderID && p.ParcelNo == parcelNo {
			n++
		}
	}
	return n
}

// Count runs a count query against the stack's database.
func (s *SimStack) Count(sql string, args ...any) int {
	s.T.Helper()
	return dbtest.Scalar[int](s.T, s.Pool, sql, args...)
}

// Fault is what the [Faults] front does to one request.
type Fault string

// Faults a script can pick.
const (
	// FaultNone passes the request to the API and its answer back.
	FaultNone Fault = ""
	// Fault503 answers 503 store_unavailable, as the API does when the
	// database cannot be reached, without reaching the API.
	Fault503 Fault = "503"
	// Fault500 answers 500 internal without reaching the API.
	Fault500 Fault = "500"
	// FaultGateway502 answers 502 with a proxy's HTML page (no problem code).
	FaultGateway502 Fault = "502"
	// Fault504 answers 504 with a proxy's HTML page.
	Fault504 Fault = "504"
	// Fault429 answers 429 with Retry-After.
	Fault429 Fault = "429"
	// FaultDrop lets the API answer (and commit), then closes the connection
	// before a byte of the answer is sent: the lost reply.
	FaultDrop Fault = "drop"
	// FaultRestart lets the API answer, then restarts it ([SimStack.Restart])
	// before the answer is sent.
	FaultRestart Fault = "restart"
)

// Seen is one request the front received and what it did with it.
type Seen struct {
	Method string
	Path   string
	Key    string // the Idempotency-Key field as sent
	Prefer string
	Fault  Fault
}

// Faults is an [http.Handler] in front of the API that fails requests the
// way a network, a load balancer and a crashing process do, as a script says.
type Faults struct {
	// RetryAfter is the Retry-After of the answers it makes up.
	RetryAfter string

	mu      sync.Mutex
	script  func(n int, r *http.Request) Fault
	seen    []Seen
	next    http.Handler
	restart func()
}

// Script sets what happens to each request: n counts the requests with the
// same method and path so far, from 1 (the first POST /v1/labels is n 1).
// Nil passes everything.
func (f *Faults) Script(fn func(n int, r *http.Request) Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = fn
}

// Seen returns every request received, in order.
func (f *Faults) Seen() []Seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Seen(nil), f.seen...)
}

// Count returns how many requests with method and path were received.
func (f *Faults) Count(method, path string) int {
	n := 0
	for _, s := range f.Seen() {
		if s.Method == method && s.Path == path {
			n++
		}
	}
	return n
}

// ServeHTTP implements http.Handler.
func (f *Faults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	n := 1
	for _, s := range f.seen {
		if s.Method == r.Method && s.Path == r.URL.Path {
			n++
		}
	}
	fault := FaultNone
	if f.script != nil {
		fault = f.script(n, r)
	}
	f.seen = append(f.seen, Seen{Method: r.Method, Path: r.URL.Path, Key: r.Header.Get("Idempotency-Key"), Prefer: r.Header.Get("Prefer"), Fault: fault})
	next, restart := f.next, f.restart
	f.mu.Unlock()

	switch fault {
	case FaultNone:
		next.ServeHTTP(w, r)
	case Fault503:
		w.Header().Set("Retry-After", f.RetryAfter)
		writeMadeUpProblem(w, labels.NewProblem(labels.CodeStoreUnavailable, "the key store cannot be reached; retry with the same key"))
	case Fault500:
		writeMadeUpProblem(w, labels.NewProblem(labels.CodeInternal, "an internal error occurred; retry with the same key"))
	case FaultGateway502, Fault504:
		status := http.StatusBadGateway
		if fault == Fault504 {
			status = http.StatusGatewayTimeout
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		_, _ = w.Write([]byte("<html><body><h1>" + http.StatusText(status) + "</h1></body></html>"))
	case Fault429:
		w.Header().Set("Retry-After", f.RetryAfter)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte("slow down"))
	case FaultDrop, FaultRestart:
		next.ServeHTTP(httptest.NewRecorder(), r)
		if fault == FaultRestart {
			restart() // cuts this connection with every other
			return
		}
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	default:
		panic("stacktest: unknown fault " + string(fault))
	}
}

func writeMadeUpProblem(w http.ResponseWriter, p *labels.Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.Body())
}
