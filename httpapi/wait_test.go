package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
)

// These tests drive Prefer: wait's clock: the sweep ticks when a test sends on
// ticks, and a held request's wait ends only when the test closes end. What
// the API reads while requests are held is counted on its pool (reads).

// intentReads counts the API's statements on label_intents: the sweep's one
// query for every held request, and the reads of one intent, by request id.
type intentReads struct {
	mu     sync.Mutex
	sweeps int // started
	swept  int // ended
	byID   map[string]int
}

// isSweep tells the sweep's query.
func isSweep(sql string) bool {
	return strings.Contains(sql, "label_intents") && strings.Contains(sql, "ANY") && strings.Contains(sql, "'pending'")
}

func (c *intentReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "label_intents") {
		return ctx
	}
	ctx = context.WithValue(ctx, sqlKey{}, d.SQL)
	c.mu.Lock()
	defer c.mu.Unlock()
	if isSweep(d.SQL) {
		c.sweeps++
		return ctx
	}
	for _, a := range d.Args {
		if id, ok := a.(string); ok && strings.HasPrefix(id, "lr_") {
			c.byID[id]++
		}
	}
	return ctx
}

func (c *intentReads) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if sql, ok := ctx.Value(sqlKey{}).(string); ok && isSweep(sql) {
		c.mu.Lock()
		c.swept++
		c.mu.Unlock()
	}
}

type sqlKey struct{}

func (c *intentReads) sweepsEnded() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.swept
}

func (c *intentReads) counts() (sweeps int, byID map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byID = map[string]int{}
	for k, v := range c.byID {
		byID[k] = v
	}
	return c.sweeps, byID
}

func (c *intentReads) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweeps, c.swept, c.byID = 0, 0, map[string]int{}
}

type waitAPI struct {
	*stacktest.Stack // the API's URL, and the database (Pool) without the count
	api              *pgxpool.Pool
	metrics          *metrics.Metrics
	reads            *intentReads
	ticks            chan time.Time

	mu  sync.Mutex
	end chan time.Time // closed to end the waits of the requests held now
}

type waitOpts struct {
	maxWaiters int
	pool       *pgxpool.Pool // the database (a fresh one when nil)
	noListener bool          // the sweep alone wakes held requests
}

// newWaitAPI serves the API on its own pool, which counts its reads, with a
// listener on notify.ChannelFinal that has connected before it returns.
func newWaitAPI(t *testing.T, o waitOpts) *waitAPI {
	t.Helper()
	pool := o.pool
	if pool == nil {
		pool, _ = dbtest.New(t)
	}
	cfg := pool.Config().Copy()
	reads := &intentReads{byID: map[string]int{}}
	cfg.ConnConfig.Tracer = reads
	cfg.HealthCheckPeriod = time.Hour // nothing but the requests takes a connection
	api, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(api.Close)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var listener *notify.Listener
	if !o.noListener {
		listener = notify.NewListener(pool.Config().ConnConfig.Copy(), zerolog.Nop(), notify.ChannelFinal)
		connected, unsubscribe := listener.Subscribe(notify.ChannelFinal, "")
		defer unsubscribe()
		wg.Go(func() { listener.Run(ctx) })
		<-connected
	}
	w := &waitAPI{api: api, metrics: metrics.New(metrics.API), reads: reads,
		ticks: make(chan time.Time), end: make(chan time.Time)}
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Deps{
		Opts: accept.Opts{Pool: api}, Listener: listener, Metrics: w.metrics, Log: zerolog.Nop(), MaxWaiters: o.maxWaiters,
		WaitSweepTicks: w.ticks, WaitAfter: w.after,
	}))
	// A request answered at once is answered within the client's timeout, on
	// any machine; one held until the test ends its wait is not.
	w.Stack = &stacktest.Stack{T: t, Pool: pool, URL: srv.URL, Client: &http.Client{Timeout: time.Minute}}
	// Closed before the server: every held request ends its wait first.
	t.Cleanup(srv.Close)
	t.Cleanup(w.endWaits)
	return w
}

// after is a held request's deadline: when the test calls endWaits.
func (w *waitAPI) after(time.Duration) <-chan time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

// endWaits ends the wait of every request held now.
func (w *waitAPI) endWaits() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.end)
	w.end = make(chan time.Time)
}

// held waits until n requests are held.
func (w *waitAPI) held(n int) {
	w.T.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for testutil.ToFloat64(w.metrics.Waiters) != float64(n) {
		if time.Now().After(deadline) {
			w.T.Fatalf("%v requests held, want %d", testutil.ToFloat64(w.metrics.Waiters), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tick has the sweep run n times, and returns when they have.
func (w *waitAPI) tick(n int) {
	w.T.Helper()
	want := w.reads.sweepsEnded() + n
	for range n {
		w.ticks <- time.Now()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for w.reads.sweepsEnded() < want {
		if time.Now().After(deadline) {
			w.T.Fatalf("%d sweeps ended, want %d", w.reads.sweepsEnded(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// doAsync sends req and reads the whole answer, from a goroutine other than
// the test's: errors are returned, not reported to the test.
func doAsync(req *http.Request) (stacktest.Response, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return stacktest.Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return stacktest.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// postAsync sends POST /v1/labels from a goroutine other than the test's.
func postAsync(url, token, key string, body []byte, prefer string) (stacktest.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/labels", bytes.NewReader(body))
	if err != nil {
		return stacktest.Response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	return doAsync(req)
}

// holdAll sends the creates at once with Prefer: wait=30 and returns their
// answers (in order) once every one is answered.
func holdAll(url, token string, keys []string, bodies [][]byte) func(t *testing.T) []stacktest.Response {
	out := make([]stacktest.Response, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() { out[i], errs[i] = postAsync(url, token, keys[i], bodies[i], "wait=30") })
	}
	return func(t *testing.T) []stacktest.Response {
		t.Helper()
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, keys[i])
		}
		return out
	}
}

// Past PREFER_WAIT_MAX held requests, a Prefer: wait is answered at once, as
// if it had no preference: 202, no Preference-Applied, and Retry-After the
// wait it asked for. Held requests hold no pooled connection, and another
// caller's create is served while the cap is full.
func TestPreferWaitPastTheCapAnswersAtOnce(t *testing.T) {
	t.Parallel()
	const maxWaiters = 3
	w := newWaitAPI(t, waitOpts{maxWaiters: maxWaiters})
	tok, other := w.Token("fulfilment"), w.Token("other")
	var keys []string
	var bodies [][]byte
	for i := range maxWaiters + 1 {
		keys = append(keys, fmt.Sprintf("k-%d", i))
		bodies = append(bodies, stacktest.ParcelBody(int64(100+i), 1, 100))
		w.Accept(tok, keys[i], bodies[i]) // no worker: they stay pending
	}

	answers := holdAll(w.URL, tok, keys[:maxWaiters], bodies[:maxWaiters])
	w.held(maxWaiters)
	require.Zero(t, w.api.Stat().AcquiredConns(), "a held request holds no pooled connection")

	r := w.Create(tok, keys[maxWaiters], bodies[maxWaiters], "Prefer", "wait=7")
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	require.Empty(t, r.Header.Get("Preference-Applied"), "not held: the preference was not applied")
	require.Equal(t, "7", r.Header.Get("Retry-After"))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "pending", stacktest.Decode[labels.LabelRequest](t, r.Body).Status)

	// Another caller, while the cap is full: its create is accepted, and its
	// own Prefer: wait is answered at once too (the cap is the process's).
	r = w.Create(other, "o-1", stacktest.ParcelBody(200, 1, 100))
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	r = w.Create(other, "o-2", stacktest.ParcelBody(201, 1, 100), "Prefer", "wait=30")
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	require.Empty(t, r.Header.Get("Preference-Applied"))
	require.Equal(t, "30", r.Header.Get("Retry-After"))
	w.held(maxWaiters)

	w.endWaits()
	for i, a := range answers(t) {
		require.Equal(t, http.StatusAccepted, a.Status, keys[i])
		require.Equal(t, "wait=30", a.Header.Get("Preference-Applied"), keys[i])
		require.Equal(t, "1", a.Header.Get("Retry-After"), keys[i])
	}
	w.held(0)
	require.Equal(t, 2.0, testutil.ToFloat64(w.metrics.WaitOutcomes.WithLabelValues("capped")))
	require.Equal(t, float64(maxWaiters), testutil.ToFloat64(w.metrics.WaitOutcomes.WithLabelValues("timeout")))

	// With the cap freed, a Prefer: wait is held again.
	again := holdAll(w.URL, tok, keys[maxWaiters:], bodies[maxWaiters:])
	w.held(1)
	w.endWaits()
	require.Equal(t, "wait=30", again(t)[0].Header.Get("Preference-Applied"))
}

// Held requests are woken by the completion's notification, not by polling:
// while they wait, the sweep reads them all in one query per tick and none is
// read on its own; once the carrier answers, each is woken and reads its
// intent once, and the answer is the label, with no tick sent.
func TestPreferWaitIsWokenByTheNotification(t *testing.T) {
	t.Parallel()
	// The worker, its carrier and its notifier; a stalled carrier call ends
	// only when the test releases it.
	stack := stacktest.New(t, stacktest.Opts{LeaseDuration: time.Hour, CarrierTimeout: 30 * time.Minute})
	const n = 8
	stack.Carrier.StallFirst(n)
	w := newWaitAPI(t, waitOpts{pool: stack.Pool})
	tok := w.Token("fulfilment")
	var keys []string
	var bodies [][]byte
	for i := range n {
		keys = append(keys, fmt.Sprintf("k-%d", i))
		bodies = append(bodies, stacktest.ParcelBody(int64(300+i), 1, 100))
	}
	answers := holdAll(w.URL, tok, keys, bodies)
	w.held(n)

	const ticks = 5
	w.tick(ticks)
	sweeps, byID := w.reads.counts()
	require.Equal(t, ticks, sweeps, "one query per tick for every held request")
	require.Empty(t, byID, "no held request reads its own intent before it is woken")
	require.Zero(t, w.api.Stat().AcquiredConns())

	w.reads.reset()
	close(stack.Carrier.Release)
	for i, a := range answers(t) {
		require.Equal(t, http.StatusCreated, a.Status, "%s: %s", keys[i], a.Body)
		require.Equal(t, "wait=30", a.Header.Get("Preference-Applied"))
	}
	sweeps, byID = w.reads.counts()
	require.Zero(t, sweeps, "no tick was sent: the notification woke them")
	require.Len(t, byID, n)
	for id, reads := range byID {
		require.Equal(t, 1, reads, "%s: one read, when woken", id)
	}
	require.Equal(t, float64(n), testutil.ToFloat64(w.metrics.WaitOutcomes.WithLabelValues("final")))
}

// failSilently makes the intent of key final (a saved carrier_rejected) as the
// worker would, but without a notification: as if it had been lost.
func failSilently(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	p := labels.NewProblem(labels.CodeCarrierRejected, "rejected")
	tag, err := pool.Exec(context.Background(), `UPDATE label_intents SET status = 'failed', error = $2, completed_at = now()
		WHERE idem_key = $1 AND status = 'pending'`, key, string(p.Body()))
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// A completion whose notification was lost is found by the sweep: one query
// for every held request, at the next tick; without a listener the sweep is
// the only wake-up. After the listener reconnects (notifications may have been
// missed meanwhile), the sweep runs at once.
func TestPreferWaitSweepFindsWhatNoNotificationSaid(t *testing.T) {
	t.Parallel()
	for _, noListener := range []bool{false, true} {
		t.Run(fmt.Sprintf("no-listener=%v", noListener), func(t *testing.T) {
			t.Parallel()
			w := newWaitAPI(t, waitOpts{noListener: noListener})
			tok := w.Token("fulfilment")
			const n = 6
			var keys []string
			var bodies [][]byte
			for i := range n {
				keys = append(keys, fmt.Sprintf("k-%d", i))
				bodies = append(bodies, stacktest.ParcelBody(int64(400+i), 1, 100))
				w.Accept(tok, keys[i], bodies[i])
			}
			answers := holdAll(w.URL, tok, keys, bodies)
			w.held(n)
			for _, k := range keys {
				failSilently(t, w.Pool, k)
			}
			w.reads.reset()
			w.tick(1)
			for i, a := range answers(t) {
				requireProblem(t, a, http.StatusUnprocessableEntity, labels.CodeCarrierRejected)
				require.Equal(t, "wait=30", a.Header.Get("Preference-Applied"), keys[i])
			}
			sweeps, byID := w.reads.counts()
			require.Equal(t, 1, sweeps, "one query for all of them")
			require.Len(t, byID, n)
			for id, reads := range byID {
				require.Equal(t, 1, reads, id)
			}
		})
	}
	t.Run("reconnect", func(t *testing.T) {
		t.Parallel()
		w := newWaitAPI(t, waitOpts{})
		tok := w.Token("fulfilment")
		body := stacktest.ParcelBody(500, 1, 100)
		w.Accept(tok, "k", body)
		answer := holdAll(w.URL, tok, []string{"k"}, [][]byte{body})
		w.held(1)
		failSilently(t, w.Pool, "k")
		// The listener's session ends; it connects again and the sweep runs.
		listeners := dbtest.Scalar[int](t, w.Pool, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN%'`)
		require.Equal(t, 1, listeners)
		a := answer(t)[0]
		requireProblem(t, a, http.StatusUnprocessableEntity, labels.CodeCarrierRejected)
		require.Equal(t, "wait=30", a.Header.Get("Preference-Applied"))
	})
}

// getAsync sends a GET with Prefer: wait=30 from a goroutine other than the
// test's.
func getAsync(url, token, path string) (stacktest.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url+path, nil)
	if err != nil {
		return stacktest.Response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Prefer", "wait=30")
	return doAsync(req)
}

// GET /v1/label-requests/{id} and GET /v1/label-requests?idempotency_key=K
// honour Prefer: wait=N as the create does (api.md): held while the intent
// is pending, answered with the final label request once it is.
func TestGetLabelRequestHonoursPreferWait(t *testing.T) {
	t.Parallel()
	stack := stacktest.New(t, stacktest.Opts{LeaseDuration: time.Hour, CarrierTimeout: 30 * time.Minute})
	stack.Carrier.StallFirst(1)
	w := newWaitAPI(t, waitOpts{pool: stack.Pool})
	tok := w.Token("fulfilment")
	created, err := postAsync(w.URL, tok, "k-get", stacktest.ParcelBody(700, 1, 100), "")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, created.Status, string(created.Body))
	lr := stacktest.Decode[labels.LabelRequest](t, created.Body)

	paths := []string{"/v1/label-requests/" + lr.ID, "/v1/label-requests?idempotency_key=k-get"}
	answers := make([]stacktest.Response, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Go(func() { answers[i], errs[i] = getAsync(w.URL, tok, p) })
	}
	w.held(len(paths))
	close(stack.Carrier.Release)
	wg.Wait()
	for i, a := range answers {
		require.NoError(t, errs[i], paths[i])
		require.Equal(t, http.StatusOK, a.Status, "%s: %s", paths[i], a.Body)
		require.Equal(t, "wait=30", a.Header.Get("Preference-Applied"), paths[i])
		require.Empty(t, a.Header.Get("Retry-After"), paths[i])
		got := stacktest.Decode[labels.LabelRequest](t, a.Body)
		require.Equal(t, labels.StatusSucceeded, got.Status, paths[i])
		require.NotNil(t, got.Label, paths[i])
	}
}
