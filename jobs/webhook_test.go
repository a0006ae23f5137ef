package jobs_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/webhook"
)

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
	at     time.Time
}

// receiver is a real HTTP server that records every delivery and answers
// what respond says (default 204).
type receiver struct {
	mu      sync.Mutex
	got     []delivery
	respond func(n int, r *http.Request) (int, http.Header)
	srv     *httptest.Server
}

func newReceiver(t *testing.T, respond func(n int, r *http.Request) (int, http.Header)) *receiver {
	rc := &receiver{respond: respond}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, delivery{header: r.Header.Clone(), body: body, at: time.Now()})
	n := len(rc.got)
	respond := rc.respond
	rc.mu.Unlock()
	status := http.StatusNoContent
	if respond != nil {
		var h http.Header
		status, h = respond(n, r)
		for k, v := range h {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(status)
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

// lenient is the policy of tests whose receivers are httptest servers.
var lenient = webhook.Policy{AllowInsecure: true, AllowPrivate: true}

// setHook registers url for caller and returns the printed secret.
func setHook(t *testing.T, s *stacktest.Stack, caller, url string) string {
	t.Helper()
	printed, raw, err := webhook.NewSecret()
	require.NoError(t, err)
	created, err := postgres.SetWebhook(context.Background(), s.Pool, caller, url, postgres.Secret{Value: raw})
	require.NoError(t, err)
	require.True(t, created)
	return printed
}

func eventState(t *testing.T, s *stacktest.Stack, requestID string) (state string, attempts int) {
	t.Helper()
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		`SELECT state, attempts FROM webhook_events WHERE request_id = $1`, requestID).Scan(&state, &attempts))
	return state, attempts
}

// Every label request that becomes final emits one event, written with its
// completion: a success, a carrier rejection, a carrier that stayed
// unavailable. Replays emit none, and a caller without an endpoint gets none.
// Each delivery verifies with the printed secret and carries the label
// request as GET returns it.
func TestWebhookOneEventPerFinalRequest(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{MaxAttempts: 2, Webhooks: jobs.WebhookConfig{Policy: lenient, Metrics: metrics.NewWebhooks(nil)}})
	rc := newReceiver(t, nil)
	tok := s.Token("shop")
	quiet := s.Token("quiet")
	secret := setHook(t, s, "shop", rc.srv.URL+"/hooks")
	s.Carrier.Script = func(_ int, key string) string {
		switch key {
		case carrier.DeriveKey("shop", "k-reject"):
			return "reject"
		case carrier.DeriveKey("shop", "k-down"):
			return "unavailable"
		}
		return ""
	}

	want := map[string]string{} // request id → event type
	for i, tc := range []struct{ key, typ, code string }{
		{"k-ok", client.EventSucceeded, ""},
		{"k-reject", client.EventFailed, "carrier_rejected"},
		{"k-down", client.EventFailed, "carrier_unavailable"},
	} {
		body := stacktest.ParcelBody(5000+int64(i), 1, 900)
		lr := s.Accept(tok, tc.key, body)
		final := s.WaitFinal(tok, lr.ID)
		require.Contains(t, string(final.Body), tc.code)
		want[lr.ID] = tc.typ
		for range 3 { // replays of the final answer
			r := s.Create(tok, tc.key, body)
			require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
		}
	}
	other := s.Accept(quiet, "k-quiet", stacktest.ParcelBody(6000, 1, 900))
	s.WaitFinal(quiet, other.ID)

	require.Eventually(t, func() bool {
		return s.Count(`SELECT count(*) FROM webhook_events WHERE state = 'delivered'`) == 3
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, 3, s.Count(`SELECT count(*) FROM webhook_events`), "one event per final request, none for replays or for a caller without an endpoint")

	byID := map[string]client.Event{}
	for _, d := range rc.deliveries() {
		require.Equal(t, "application/json", d.header.Get("Content-Type"))
		ev, err := client.VerifyWebhook(secret, d.header, d.body, time.Now())
		require.NoError(t, err)
		byID[ev.ID] = ev
	}
	require.Len(t, byID, 3)
	for requestID, typ := range want {
		ev, ok := byID["msg_"+requestID]
		require.True(t, ok, "no delivery for %s", requestID)
		require.Equal(t, typ, ev.Type)
		require.Equal(t, requestID, ev.Data.ID)
		// data is the label request as GET returns it, and the timestamp its completion.
		get := s.Do(http.MethodGet, "/v1/label-requests/"+requestID, tok, nil)
		data, err := json.Marshal(ev.Data)
		require.NoError(t, err)
		require.JSONEq(t, string(get.Body), string(data))
		require.True(t, ev.Data.CompletedAt.Equal(ev.Timestamp), "%s vs %s", ev.Data.CompletedAt, ev.Timestamp)
	}
	require.Zero(t, s.Count(`SELECT count(*) FROM webhook_events WHERE request_id = $1`, other.ID))
}

// A receiver that is down (connections refused) and then up gets the event
// after retries, every attempt with the same webhook-id; a 503 with
// Retry-After is honoured.
func TestWebhookReceiverDownThenUp(t *testing.T) {
	t.Parallel()
	m := metrics.NewWebhooks(nil)
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{Policy: lenient, Metrics: m,
		RetryBase: 20 * time.Millisecond, RetryMax: 2 * time.Second, MaxAttempts: 50}})
	// An address nothing listens on yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	tok := s.Token("shop")
	secret := setHook(t, s, "shop", "http://"+addr+"/hooks")

	lr := s.Accept(tok, "k-1", stacktest.ParcelBody(7000, 1, 900))
	s.WaitFinal(tok, lr.ID)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Attempts.WithLabelValues("error")) >= 2 }, time.Minute, 10*time.Millisecond,
		"attempts refused while nothing listens")
	state, _ := eventState(t, s, lr.ID)
	require.Equal(t, "pending", state)

	// Up: the first answer is 503 with Retry-After: 1, then 200.
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	rc := &receiver{respond: func(n int, _ *http.Request) (int, http.Header) {
		if n == 1 {
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}
		}
		return http.StatusOK, nil
	}}
	srv := &http.Server{Handler: http.HandlerFunc(rc.serve)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	require.Eventually(t, func() bool { st, _ := eventState(t, s, lr.ID); return st == "delivered" }, time.Minute, 10*time.Millisecond)
	got := rc.deliveries()
	require.Len(t, got, 2)
	require.GreaterOrEqual(t, got[1].at.Sub(got[0].at), 900*time.Millisecond, "Retry-After: 1 honoured")
	for _, d := range got {
		require.Equal(t, "msg_"+lr.ID, d.header.Get("webhook-id"))
		_, err := client.VerifyWebhook(secret, d.header, d.body, time.Now())
		require.NoError(t, err)
	}
	require.Equal(t, 1.0, testutil.ToFloat64(m.Deliveries.WithLabelValues(metrics.WebhookDelivered)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Attempts.WithLabelValues("503")))
	require.GreaterOrEqual(t, testutil.ToFloat64(m.Attempts.WithLabelValues("error")), 2.0)
	_, attempts := eventState(t, s, lr.ID)
	require.Equal(t, int(testutil.ToFloat64(m.Attempts.WithLabelValues("error")))+2, attempts, "every attempt counted on the event")
}

// A 410 disables the endpoint at once: the event is dropped, and the next
// events are dropped without an attempt until `set` makes it active again.
// WEBHOOK_DISABLE_AFTER events in a row whose every attempt failed disable it
// too. No redirect is followed.
func TestWebhookDisabling(t *testing.T) {
	t.Parallel()
	m := metrics.NewWebhooks(nil)
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{Policy: lenient, Metrics: m, MaxAttempts: 2, DisableAfter: 2,
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}})
	ctx := context.Background()
	var mu sync.Mutex
	status := http.StatusGone
	redirected := 0
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { mu.Lock(); redirected++; mu.Unlock() }))
	t.Cleanup(target.Close)
	rc := newReceiver(t, func(int, *http.Request) (int, http.Header) {
		mu.Lock()
		defer mu.Unlock()
		return status, http.Header{"Location": {target.URL}}
	})
	tok := s.Token("shop")
	setHook(t, s, "shop", rc.srv.URL)
	hook := func() postgres.Webhook {
		hs, err := postgres.ListWebhooks(ctx, s.Pool)
		require.NoError(t, err)
		require.Len(t, hs, 1)
		return hs[0]
	}
	final := func(key string, order int64) string {
		lr := s.Accept(tok, key, stacktest.ParcelBody(order, 1, 900))
		s.WaitFinal(tok, lr.ID)
		require.Eventually(t, func() bool { st, _ := eventState(t, s, lr.ID); return st != "pending" }, time.Minute, 10*time.Millisecond)
		return lr.ID
	}

	first := final("k-1", 8001)
	require.Equal(t, postgres.WebhookDisabled, hook().State)
	require.Equal(t, "gone", dbtest.Scalar[string](t, s.Pool, `SELECT drop_reason FROM webhook_events WHERE request_id = $1`, first))
	second := final("k-2", 8002)
	require.Equal(t, "endpoint_disabled", dbtest.Scalar[string](t, s.Pool, `SELECT drop_reason FROM webhook_events WHERE request_id = $1`, second))
	require.Len(t, rc.deliveries(), 1, "a disabled endpoint gets nothing")
	// The metrics count after the outcome's commit, which final waits for.
	metricIs := func(want float64, c prometheus.Collector) {
		t.Helper()
		require.Eventually(t, func() bool { return testutil.ToFloat64(c) == want }, time.Minute, 10*time.Millisecond,
			"want %v, have %v", want, testutil.ToFloat64(c))
	}
	metricIs(1, m.EndpointsDisabled)

	// set re-enables; now every attempt is a redirect, which is not followed and fails.
	mu.Lock()
	status = http.StatusTemporaryRedirect
	mu.Unlock()
	created, err := postgres.SetWebhook(ctx, s.Pool, "shop", rc.srv.URL, postgres.Secret{Value: []byte("ignored: the caller has a live secret")})
	require.NoError(t, err)
	require.False(t, created, "set keeps the live secret")
	require.Equal(t, postgres.WebhookActive, hook().State)
	final("k-3", 8003)
	require.Equal(t, postgres.WebhookActive, hook().State)
	require.Equal(t, 1, hook().FailuresInRow)
	final("k-4", 8004)
	require.Equal(t, postgres.WebhookDisabled, hook().State, "two events in a row failed")
	metricIs(2, m.Deliveries.WithLabelValues(metrics.WebhookExhausted))
	metricIs(4, m.Attempts.WithLabelValues("3xx"))
	mu.Lock()
	require.Zero(t, redirected, "no redirect followed")
	mu.Unlock()
}

// After a rotation, deliveries carry one signature per live secret, the new
// one first; both verify. Once the overlap is over only the new one signs.
// The old secret is stored raw, the new one sealed with WEBHOOK_SECRET_KEY
// (as after a key was set): both sign.
func TestWebhookRotationSignsWithBoth(t *testing.T) {
	t.Parallel()
	rawKey := make([]byte, 32)
	_, err := rand.Read(rawKey)
	require.NoError(t, err)
	key, err := webhook.ParseSecretKey(base64.StdEncoding.EncodeToString(rawKey))
	require.NoError(t, err)
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{Policy: lenient, SecretKey: key}})
	ctx := context.Background()
	rc := newReceiver(t, nil)
	tok := s.Token("shop")
	oldSecret := setHook(t, s, "shop", rc.srv.URL)
	newSecret, raw, err := webhook.NewSecret()
	require.NoError(t, err)
	stored, sealed, err := key.Seal("shop", raw)
	require.NoError(t, err)
	require.NoError(t, postgres.RotateWebhookSecret(ctx, s.Pool, "shop", postgres.Secret{Value: stored, Sealed: sealed}, time.Hour))

	deliver := func(key string, order int64) delivery {
		lr := s.Accept(tok, key, stacktest.ParcelBody(order, 1, 900))
		s.WaitFinal(tok, lr.ID)
		require.Eventually(t, func() bool { st, _ := eventState(t, s, lr.ID); return st == "delivered" }, time.Minute, 10*time.Millisecond)
		got := rc.deliveries()
		return got[len(got)-1]
	}
	d := deliver("k-1", 9001)
	sigs := strings.Fields(d.header.Get("webhook-signature"))
	require.Len(t, sigs, 2)
	for _, secret := range []string{oldSecret, newSecret} {
		_, err := client.VerifyWebhook(secret, d.header, d.body, time.Now())
		require.NoError(t, err)
	}
	one := d.header.Clone()
	one.Set("webhook-signature", sigs[0])
	_, err = client.VerifyWebhook(newSecret, one, d.body, time.Now())
	require.NoError(t, err, "the new secret's signature comes first")

	// The overlap ends: only the new secret signs.
	_, err = s.Pool.Exec(ctx, `UPDATE webhook_secrets SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL`)
	require.NoError(t, err)
	d = deliver("k-2", 9002)
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 1)
	_, err = client.VerifyWebhook(newSecret, d.header, d.body, time.Now())
	require.NoError(t, err)
	_, err = client.VerifyWebhook(oldSecret, d.header, d.body, time.Now())
	require.ErrorIs(t, err, client.ErrWebhookSignature)
}

// A private address is refused at delivery, against the address dialled: a
// name (localhost) that resolves inside is refused as well as a literal
// loopback address, and the receiver gets nothing.
func TestWebhookPrivateAddressRefusedAtDelivery(t *testing.T) {
	t.Parallel()
	m := metrics.NewWebhooks(nil)
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{Policy: webhook.Policy{AllowInsecure: true}, Metrics: m,
		MaxAttempts: 2, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}})
	rc := newReceiver(t, nil)
	_, port, err := net.SplitHostPort(rc.srv.Listener.Addr().String())
	require.NoError(t, err)
	for i, host := range []string{"127.0.0.1", "localhost"} {
		caller := "shop" + string(rune('a'+i))
		tok := s.Token(caller)
		// Stored directly: `api webhook set` refuses these (cmd/api's tests).
		setHook(t, s, caller, "http://"+net.JoinHostPort(host, port)+"/hooks")
		lr := s.Accept(tok, "k-1", stacktest.ParcelBody(9500+int64(i), 1, 900))
		s.WaitFinal(tok, lr.ID)
		require.Eventually(t, func() bool { st, _ := eventState(t, s, lr.ID); return st == "dropped" }, time.Minute, 10*time.Millisecond, host)
		require.Contains(t, dbtest.Scalar[string](t, s.Pool, `SELECT last_error FROM webhook_events WHERE request_id = $1`, lr.ID), "refused to connect")
		require.Contains(t, dbtest.Scalar[string](t, s.Pool, `SELECT last_error FROM webhook_events WHERE request_id = $1`, lr.ID), "WEBHOOK_ALLOW_PRIVATE=true")
	}
	require.Empty(t, rc.deliveries())
	require.Equal(t, 4.0, testutil.ToFloat64(m.Attempts.WithLabelValues("refused")))
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 70; n++ {
		for range 50 {
			d := jobs.RetryDelay(5*time.Second, 10*time.Hour, n, 0)
			ceiling := 5 * time.Second
			for i := 1; i < n && ceiling < 10*time.Hour; i++ {
				ceiling *= 2
			}
			ceiling = min(ceiling, 10*time.Hour)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, ceiling, "attempt %d", n)
		}
	}
	require.GreaterOrEqual(t, jobs.RetryDelay(time.Millisecond, time.Hour, 1, 30*time.Second), 30*time.Second, "Retry-After is a floor")
	require.Equal(t, time.Minute, jobs.RetryDelay(time.Millisecond, time.Minute, 1, 24*time.Hour), "never beyond the maximum")
}

// One line per delivery attempt, with the request, caller, webhook-id,
// attempt and outcome; never the secret, a signature or the body.
func TestWebhookAttemptLogLine(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	rc := newReceiver(t, func(n int, _ *http.Request) (int, http.Header) {
		if n == 1 {
			return http.StatusInternalServerError, nil
		}
		return http.StatusNoContent, nil
	})
	tok := s.Token("fulfilment")
	secret := setHook(t, s, "fulfilment", rc.srv.URL)
	lr := s.Accept(tok, "k-log", stacktest.ParcelBody(77, 1, 900))
	var buf logtest.Buffer
	deliverLogged(t, s, lr.ID, lenient, 0, &buf)
	require.Eventually(t, func() bool { st, _ := eventState(t, s, lr.ID); return st == "delivered" }, 30*time.Second, 10*time.Millisecond)

	// The failed attempt says why at warn, with the caller and the event.
	failed := buf.Lines(t, "webhook attempt failed")
	require.Len(t, failed, 1)
	require.Equal(t, "warn", failed[0]["level"], failed[0])
	require.Equal(t, "the endpoint answered 500", failed[0]["cause"], failed[0])
	require.Equal(t, "fulfilment", failed[0]["caller"], failed[0])
	require.Equal(t, "msg_"+lr.ID, failed[0]["webhook_id"], failed[0])
	require.Equal(t, float64(1), failed[0]["attempt"], failed[0])

	lines := buf.Lines(t, "deliver_webhook attempt")
	require.Len(t, lines, 2)
	for i, want := range []string{"retry", "delivered"} {
		l := lines[i]
		require.Equal(t, want, l["outcome"], l)
		require.Equal(t, lr.ID, l["request_id"], l)
		require.Equal(t, "fulfilment", l["caller"], l)
		require.Equal(t, "msg_"+lr.ID, l["webhook_id"], l)
		require.Equal(t, float64(i+1), l["attempt"], l)
	}
	all := buf.String()
	require.NotContains(t, all, secret)
	require.NotContains(t, all, secret[len("whsec_"):])
	for _, d := range rc.deliveries() {
		require.NotContains(t, all, d.header.Get("webhook-signature"))
		require.NotContains(t, all, string(d.body))
	}
	require.NotContains(t, all, "carrier_rejected", "no part of the body")
}

// deliverLogged completes requestID as the buy-label worker does (which
// writes its webhook event) and delivers the event with a River client of
// its own under policy, logging into buf.
func deliverLogged(t *testing.T, s *stacktest.Stack, requestID string, policy webhook.Policy, maxAttempts int, buf *logtest.Buffer) {
	t.Helper()
	ctx := context.Background()
	lease := uuid.New()
	leases, err := postgres.TakeLeases(ctx, s.Pool, []postgres.LeaseRow{{RequestID: requestID, Token: lease}}, time.Minute)
	require.NoError(t, err)
	p := labels.NewProblem(labels.CodeCarrierRejected, "rejected")
	in := leases[0].Intent
	outs, err := postgres.Complete(ctx, s.Pool, []postgres.Completion{{RequestID: in.RequestID, CallerID: in.CallerID, Key: in.Key,
		Token: lease, Status: p.Status, Body: p.Body()}}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, postgres.Completed, outs[0])

	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewDeliverWebhookWorker(jobs.WebhookConfig{Pool: s.Pool, Policy: policy, MaxAttempts: maxAttempts,
		SecretKey: webhook.SecretKey{}.AllowingUnsealed(), // setHook stores the secret raw, as in development
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond, Log: zerolog.New(buf).Level(zerolog.DebugLevel)}))
	client, err := river.NewClient(riverpgxv5.New(s.Pool), &river.Config{
		Queues:            map[string]river.QueueConfig{jobs.QueueWebhooks: {MaxWorkers: 2}},
		Workers:           workers,
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		TestOnly:          true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	})
	require.NoError(t, pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// The event relay's insert: one deliver_webhook job for the event.
		_, err := client.InsertManyTx(ctx, tx, []river.InsertManyParams{{Args: jobs.DeliverWebhookArgs{RequestID: requestID}}})
		return err
	}))
}

// A worker without WEBHOOK_ALLOW_PRIVATE refuses an endpoint that `api
// webhook set` accepted with it: each attempt logs why at warn, with the
// caller and the event, and never the secret.
func TestWebhookRefusedAttemptLogged(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	rc := newReceiver(t, nil)
	tok := s.Token("shop")
	secret := setHook(t, s, "shop", rc.srv.URL) // http://127.0.0.1:port, as set with both allowances
	lr := s.Accept(tok, "k-refused", stacktest.ParcelBody(78, 1, 900))
	var buf logtest.Buffer
	deliverLogged(t, s, lr.ID, webhook.Policy{AllowInsecure: true}, 2, &buf)
	require.Eventually(t, func() bool { st, _ := eventState(t, s, lr.ID); return st == "dropped" }, 30*time.Second, 10*time.Millisecond)

	failed := append(buf.Lines(t, "webhook attempt failed"), buf.Lines(t, "webhook event dropped: every attempt failed")...)
	require.Len(t, failed, 2)
	for _, l := range failed {
		require.Equal(t, "warn", l["level"], l)
		require.Equal(t, "shop", l["caller"], l)
		require.Equal(t, "msg_"+lr.ID, l["webhook_id"], l)
		require.Contains(t, l["cause"], "refused to connect to 127.0.0.1", l)
		require.Contains(t, l["cause"], "WEBHOOK_ALLOW_PRIVATE=true", l)
	}
	require.NotContains(t, buf.String(), secret[len("whsec_"):])
	require.Empty(t, rc.deliveries())
}

// A sealed secret and a worker without WEBHOOK_SECRET_KEY: nothing is sent
// unsigned; the attempts fail, and the event is dropped after the last.
func TestWebhookSealedSecretNeedsTheKey(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{Policy: lenient, MaxAttempts: 2, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}})
	ctx := context.Background()
	rc := newReceiver(t, nil)
	tok := s.Token("shop")
	rawKey := make([]byte, 32)
	_, err := rand.Read(rawKey)
	require.NoError(t, err)
	key, err := webhook.ParseSecretKey(base64.StdEncoding.EncodeToString(rawKey))
	require.NoError(t, err)
	_, raw, err := webhook.NewSecret()
	require.NoError(t, err)
	stored, sealed, err := key.Seal("shop", raw)
	require.NoError(t, err)
	_, err = postgres.SetWebhook(ctx, s.Pool, "shop", rc.srv.URL, postgres.Secret{Value: stored, Sealed: sealed})
	require.NoError(t, err)
	lr := s.Accept(tok, "k-1", stacktest.ParcelBody(9900, 1, 900))
	s.WaitFinal(tok, lr.ID)
	require.Eventually(t, func() bool { st, _ := eventState(t, s, lr.ID); return st == "dropped" }, time.Minute, 10*time.Millisecond)
	require.Contains(t, dbtest.Scalar[string](t, s.Pool, `SELECT last_error FROM webhook_events WHERE request_id = $1`, lr.ID), "WEBHOOK_SECRET_KEY is not set")
	require.Empty(t, rc.deliveries(), "nothing sent unsigned")
}

// api webhook delete drops the undelivered events; each one's job counts the
// drop once (labels_webhook_deliveries_total{outcome="endpoint_deleted"}) and
// sends nothing more.
func TestWebhookDeleteDropsAndCounts(t *testing.T) {
	t.Parallel()
	m := metrics.NewWebhooks(nil)
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{Policy: lenient, Metrics: m,
		RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, MaxAttempts: 1000}})
	ctx := context.Background()
	rc := newReceiver(t, func(int, *http.Request) (int, http.Header) { return http.StatusServiceUnavailable, nil })
	tok := s.Token("shop")
	setHook(t, s, "shop", rc.srv.URL)
	var ids []string
	for i := range 2 {
		lr := s.Accept(tok, fmt.Sprintf("k-%d", i), stacktest.ParcelBody(9700+int64(i), 1, 900))
		s.WaitFinal(tok, lr.ID)
		ids = append(ids, lr.ID)
	}
	require.Eventually(t, func() bool {
		_, a := eventState(t, s, ids[0])
		_, b := eventState(t, s, ids[1])
		return a >= 2 && b >= 2
	}, time.Minute, 10*time.Millisecond, "both retried")

	dropped, err := postgres.DeleteWebhook(ctx, s.Pool, "shop")
	require.NoError(t, err)
	require.Equal(t, 2, dropped)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(m.Deliveries.WithLabelValues(metrics.WebhookDroppedDeleted)) == 2
	}, time.Minute, 10*time.Millisecond)
	for _, id := range ids {
		st, _ := eventState(t, s, id)
		require.Equal(t, "dropped", st)
	}
	n := len(rc.deliveries())
	time.Sleep(500 * time.Millisecond) // longer than the retry delays: a live job would have sent again
	require.Equal(t, n, len(rc.deliveries()), "nothing sent after the delete")
	require.Equal(t, 2.0, testutil.ToFloat64(m.Deliveries.WithLabelValues(metrics.WebhookDroppedDeleted)), "counted once each")
}
