// Package stacktest runs the whole pipeline inside one test: a fresh database,
// the API on an httptest server, the relay, and a River client with the real
// workers, against an in-process carrier whose faults a test scripts.
package stacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/apiserve"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/outbox"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/worker"
)

// Opts tunes a stack.
type Opts struct {
	NoWorker         bool          // API only: intents stay pending
	LeaseDuration    time.Duration // default worker.DefaultLeaseDuration
	CarrierTimeout   time.Duration // default 5s
	MaxAttempts      int           // default 5
	RetryBase        time.Duration // default 10ms
	AfterCarrierFunc func(ctx context.Context, requestID string) error
	AfterKeyInsert   func(ctx context.Context) error
	ClaimWait        time.Duration // default: the API's
	BatchMax         int           // the worker's Batch (0: shared statements of 64; -1: none)
	AcceptBatch      int           // the API's accept.Opts.Batch (0: accept.DefaultBatch; -1: none)
	// Pool, when set, is used instead of a fresh database (it must be migrated).
	Pool *pgxpool.Pool
	// Webhooks configures the webhook delivery (zero values: the defaults,
	// but a retry base of 10ms). A stack is a development setup: its
	// SecretKey always has the allowance for raw secrets
	// (WEBHOOK_ALLOW_UNSEALED).
	Webhooks jobs.WebhookConfig
}

// Stack is a running pipeline.
type Stack struct {
	T       testing.TB
	Pool    *pgxpool.Pool
	URL     string       // the API's base URL
	Client  *http.Client // sends the requests of Do (nil: http.DefaultClient)
	Carrier *FakeCarrier
	Metrics *metrics.Metrics
	River   *river.Client[pgx.Tx]
	Relay   *outbox.Relay

	worker *worker.Worker
}

// New starts a stack; everything stops when the test ends.
func New(t testing.TB, o Opts) *Stack {
	t.Helper()
	defaults(&o.LeaseDuration, &o.CarrierTimeout, &o.MaxAttempts, &o.RetryBase)
	webhookDefaults(&o.Webhooks)
	pool := o.Pool
	if pool == nil {
		pool, _ = dbtest.New(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	m := metrics.New(metrics.API, metrics.Worker)
	s := &Stack{T: t, Pool: pool, Carrier: NewFakeCarrier(), Metrics: m}

	// The API's listener also wakes the worker's relay.
	svc := apiserve.New(ctx, apiserve.Config{Listen: pool.Config().ConnConfig.Copy(), Channels: []string{notify.ChannelIntents, notify.ChannelWebhookEvents},
		Deps: httpapi.Deps{Opts: accept.Opts{Pool: pool, BeforeCommitFunc: o.AfterKeyInsert, ClaimWait: o.ClaimWait, Batch: o.AcceptBatch},
			Metrics: m, Log: log}})
	listener := svc.Listener
	api := httptest.NewServer(svc.Handler)
	s.URL = api.URL

	if !o.NoWorker {
		w := startWorker(t, ctx, worker.Config{
			Pool: pool, Carrier: s.Carrier, CarrierTimeout: o.CarrierTimeout, LeaseDuration: o.LeaseDuration,
			MaxAttempts: o.MaxAttempts, Batch: o.BatchMax, RetryBase: o.RetryBase,
			Metrics: m, Log: log, Listener: listener, AfterCarrierFunc: o.AfterCarrierFunc,
			Webhooks: o.Webhooks,
		})
		s.River, s.Relay, s.worker = w.River, w.Relay, w
	}
	t.Cleanup(func() {
		api.Close()
		if s.worker != nil {
			sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
			_ = s.worker.Stop(sctx)
			scancel()
		}
		cancel()
		svc.Close()
	})
	return s
}

// Token creates a caller and returns a bearer token of it.
func (s *Stack) Token(name string) string {
	s.T.Helper()
	tok, err := postgres.AddCaller(context.Background(), s.Pool, name)
	require.NoError(s.T, err)
	return tok
}

// TakeOver has the job of requestID attempted again now, as when the lease of
// its key runs out and River's rescuer hands the job on: both are moved into
// the past instead of waited for.
func (s *Stack) TakeOver(requestID string) {
	s.T.Helper()
	ctx := context.Background()
	_, err := s.Pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE request_id = $1`, requestID)
	require.NoError(s.T, err)
	_, err = s.Pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE args->>'request_id' = $1`, requestID)
	require.NoError(s.T, err)
}

// ExpireLease plays the lease of requestID's key running out, without waiting
// for it: the lease is moved into the past, and the job, when it waits (a
// retry or a snooze for the lease), is made available now. A running attempt
// is left alone, so no second attempt starts beside it: tests with a lease
// far longer than any work call it instead of racing a short one.
func (s *Stack) ExpireLease(requestID string) {
	s.T.Helper()
	ctx := context.Background()
	_, err := s.Pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 second'
		WHERE request_id = $1 AND locked_until > now()`, requestID)
	require.NoError(s.T, err)
	_, err = s.Pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now()
		WHERE args->>'request_id' = $1 AND state IN ('scheduled', 'retryable')`, requestID)
	require.NoError(s.T, err)
}

// Count runs a count query against the stack's database.
func (s *Stack) Count(sql string, args ...any) int {
	s.T.Helper()
	return dbtest.Scalar[int](s.T, s.Pool, sql, args...)
}

// Response is an answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends a request with optional headers (name, value pairs).
func (s *Stack) Do(method, path, token string, body []byte, headers ...string) Response {
	s.T.Helper()
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	require.NoError(s.T, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		// A Content-Type given replaces the default ("" removes it); any
		// other header is added, so that a test can repeat one.
		if http.CanonicalHeaderKey(headers[i]) == "Content-Type" {
			req.Header.Del("Content-Type")
			if headers[i+1] == "" {
				continue
			}
		}
		req.Header.Add(headers[i], headers[i+1])
	}
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	require.NoError(s.T, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.T, err)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Create posts a label request under key.
func (s *Stack) Create(token, key string, body []byte, headers ...string) Response {
	s.T.Helper()
	return s.Do(http.MethodPost, "/v1/labels", token, body, append([]string{"Idempotency-Key", key}, headers...)...)
}

// Accept creates a label request under key, requires it accepted (202) and
// returns it.
func (s *Stack) Accept(token, key string, body []byte) labels.LabelRequest {
	s.T.Helper()
	r := s.Create(token, key, body)
	require.Equal(s.T, http.StatusAccepted, r.Status, string(r.Body))
	return Decode[labels.LabelRequest](s.T, r.Body)
}

// Decode unmarshals the JSON of b, failing t when it does not decode.
func Decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}

// WaitFinal polls a label request until it is final and returns it.
func (s *Stack) WaitFinal(token, requestID string) Response {
	s.T.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := s.Do(http.MethodGet, "/v1/label-requests/"+requestID, token, nil)
		require.Equal(s.T, http.StatusOK, r.Status, string(r.Body))
		if !bytes.Contains(r.Body, []byte(`"status":"pending"`)) {
			return r
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("label request %s still pending after 60s", requestID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Final waits until a label request is final and returns it.
func (s *Stack) Final(token, requestID string) labels.LabelRequest {
	s.T.Helper()
	return Decode[labels.LabelRequest](s.T, s.WaitFinal(token, requestID).Body)
}

// Example returns a stack, the token of caller fulfilment and the body of the
// seed's example request (parcel 1 of order 918273, 1,450 g), which most
// tests send under the key label:918273:1:v1.
func Example(t testing.TB, o Opts) (*Stack, string, []byte) {
	t.Helper()
	s := New(t, o)
	return s, s.Token("fulfilment"), ParcelBody(918273, 1, 1450)
}

// ParcelBody returns a valid request body for order and parcel.
func ParcelBody(order int64, parcel int, weight int) []byte {
	return fmt.Appendf(nil, `{"order_id":%d,"parcel_no":%d,"weight_g":%d,"service":"ground","ship_to":{"name":"A. Example","line1":"1 Example Street","city":"Exampleton","postal_code":"10115","country":"DE"}}`, order, parcel, weight)
}

// FakeCarrier is an in-process carrier that deduplicates by key like the real
// protocol, counts purchases, and can be scripted to fail.
type FakeCarrier struct {
	mu        sync.Mutex
	seq       int
	byKey     map[string]*carrier.Label
	purchases map[string]int // key → labels bought
	calls     int
	// Script, when set, decides each call's fault before the purchase:
	// "" (none), "unavailable" (503, nothing bought), "drop" (bought, reply
	// lost), "reject" (422), "slow" (waits for Release, then answers).
	Script  func(call int, key string) string
	Release chan struct{}
}

// NewFakeCarrier returns a carrier that always answers.
func NewFakeCarrier() *FakeCarrier {
	return &FakeCarrier{byKey: map[string]*carrier.Label{}, purchases: map[string]int{}, Release: make(chan struct{})}
}

// StallFirst scripts the first n purchase calls to wait for Release (the
// later ones answer at once) and returns whether one of them has begun.
func (c *FakeCarrier) StallFirst(n int) (begun func() bool) {
	var stalled atomic.Bool
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Script = func(call int, _ string) string {
		if call <= n {
			stalled.Store(true)
			return "slow"
		}
		return ""
	}
	return stalled.Load
}

// Buy implements jobs.Carrier.
func (c *FakeCarrier) Buy(ctx context.Context, key string, req carrier.PurchaseRequest) (*carrier.Label, error) {
	c.mu.Lock()
	c.calls++
	call := c.calls
	script := c.Script
	c.mu.Unlock()
	fault := ""
	if script != nil {
		fault = script(call, key)
	}
	switch fault {
	case "unavailable":
		return nil, &carrier.UnknownOutcomeError{Status: 503, Err: fmt.Errorf("503")}
	case "reject":
		return nil, &carrier.RejectedError{Status: 422, Code: "address_invalid", Message: "no such postal code"}
	case "slow":
		// Like a real HTTP call, a slow one ends early if its context does.
		select {
		case <-c.Release:
		case <-ctx.Done():
			return nil, &carrier.UnknownOutcomeError{Err: ctx.Err()}
		}
	}
	c.mu.Lock()
	l, replay := c.byKey[key]
	if !replay {
		c.seq++
		l = &carrier.Label{CarrierLabelID: fmt.Sprintf("CL-%d", c.seq), TrackingNo: fmt.Sprintf("GRD%09d-%d", req.OrderID, c.seq),
			CostCents: 612, Currency: "USD", PurchasedAt: time.Now().UTC()}
		// Every other label names a document, as a carrier may or may not.
		if c.seq%2 == 1 {
			size := int64(1000 + c.seq)
			l.LabelURL = fmt.Sprintf("https://carrier.test/v1/labels/CL-%d/document", c.seq)
			l.LabelContentType, l.LabelSizeBytes = "application/zpl", &size
		}
		c.byKey[key] = l
		c.purchases[key]++
	}
	c.mu.Unlock()
	if fault == "drop" {
		return nil, &carrier.UnknownOutcomeError{Err: io.ErrUnexpectedEOF}
	}
	out := *l
	out.Replayed = replay
	return &out, nil
}

// Purchases returns how many labels were bought under key, and in all.
func (c *FakeCarrier) Purchases(key string) (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, n := range c.purchases {
		total += n
	}
	return c.purchases[key], total
}

// Calls returns how many purchase calls were made.
func (c *FakeCarrier) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}
