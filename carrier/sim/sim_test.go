package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
)

// clock is a settable NowFunc.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

var day = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

type testBundle struct {
	sim    *sim.Server
	url    string
	client *carrier.Client
	clock  *clock
}

// setup serves a simulator with opts on a test server. Its client opens a new
// connection per call: Go's transport silently resends a request carrying an
// Idempotency-Key when a reused connection breaks, which would hide the dropped
// replies some tests are about.
func setup(t *testing.T, opts *sim.Options) *testBundle {
	t.Helper()
	clk := &clock{now: day.Add(10*time.Hour + time.Second)}
	o := sim.Options{}
	if opts != nil {
		o = *opts
	}
	if o.NowFunc == nil {
		o.NowFunc = clk.Now
	}
	s, err := sim.New(&o)
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	// Runs before srv.Close: wakes calls that wait, so the server can stop.
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return &testBundle{
		sim: s,
		url: srv.URL,
		client: carrier.NewClient(srv.URL, &carrier.ClientOpts{
			Token:      o.Token,
			HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		}),
		clock: clk,
	}
}

func purchase(orderID int64, postalCode string) carrier.PurchaseRequest {
	return carrier.PurchaseRequest{
		Reference: fmt.Sprintf("lr_%d", orderID),
		OrderID:   orderID,
		ParcelNo:  1,
		WeightG:   1450,
		Service:   "ground",
		ShipTo: carrier.Address{
			Name: "Erika Mustermann", Line1: "Heidestr. 17", City: "Köln", PostalCode: postalCode, Country: "DE",
		},
	}
}

func (b *testBundle) buy(t *testing.T, key string, req carrier.PurchaseRequest) (*carrier.Label, error) {
	t.Helper()
	return b.client.Buy(context.Background(), key, req)
}

// mustBuy buys a label that the simulator must sell.
func (b *testBundle) mustBuy(t *testing.T, key string, req carrier.PurchaseRequest) *carrier.Label {
	t.Helper()
	l, err := b.buy(t, key, req)
	require.NoError(t, err)
	return l
}

// buyAsync starts a purchase and returns where its error arrives.
func (b *testBundle) buyAsync(ctx context.Context, key string, req carrier.PurchaseRequest) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := b.client.Buy(ctx, key, req)
		done <- err
	}()
	return done
}

// buyInFlight is buyAsync for a simulator that holds the purchase (a
// timeout): it returns once the purchase is in flight there.
func (b *testBundle) buyInFlight(t *testing.T, ctx context.Context, key string, req carrier.PurchaseRequest) <-chan error {
	t.Helper()
	done := b.buyAsync(ctx, key, req)
	waitFor(t, func() bool { return b.sim.Stats().InFlight == 1 })
	return done
}

// waitFor waits until cond holds; the test fails if it does not within a
// minute (a bound for a machine under any load, not a measure).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, time.Minute, 5*time.Millisecond)
}

// do sends a raw request and returns status and body.
func (b *testBundle) do(t *testing.T, method, path, body string, headers ...string) (int, string) {
	t.Helper()
	resp, got := send(t, method, b.url+path, body, headers...)
	return resp.StatusCode, got
}

// send sends a raw request to url and returns the answer, its body read.
// headers are name, value pairs; a header whose value is empty is not sent.
func send(t *testing.T, method, url, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] != "" {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(got)
}

func requireUnknown(t *testing.T, err error, status int) *carrier.UnknownOutcomeError {
	t.Helper()
	var unknown *carrier.UnknownOutcomeError
	require.ErrorAs(t, err, &unknown, "got %T %v", err, err)
	require.Equal(t, status, unknown.Status, "%v", err)
	return unknown
}

func TestBuyAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	first := b.mustBuy(t, "k1", purchase(918273, "51147"))
	require.True(t, first.HasDocument())
	require.Equal(t, b.url+"/v1/labels/CL-1/document", first.LabelURL)
	first.LabelURL, first.LabelContentType, first.LabelSizeBytes = "", "", nil
	require.Equal(t, &carrier.Label{
		CarrierLabelID: "CL-1",
		TrackingNo:     "GRD000918273",
		CostCents:      450 + 1450/10,
		Currency:       "USD",
		PurchasedAt:    day.Add(10*time.Hour + time.Second),
	}, first)

	b.clock.Set(day.Add(11 * time.Hour))
	again := b.mustBuy(t, "k1", purchase(918273, "51147"))
	require.True(t, again.Replayed)
	again.Replayed = false
	again.LabelURL, again.LabelContentType, again.LabelSizeBytes = "", "", nil
	require.Equal(t, first, again, "a replay is the same label, bought at the same time")

	st := b.sim.Stats()
	require.Equal(t, 1, st.Purchases)
	require.Equal(t, int64(2), st.Calls)
	require.Equal(t, int64(1), st.Replays)
	require.Equal(t, map[string]int{"k1": 1}, st.ByKey)
}

func TestSameKeyDifferentBodyReplays(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	first := b.mustBuy(t, "k1", purchase(1, "51147"))
	other := purchase(2, "99999")
	other.Service = "overnight"
	second := b.mustBuy(t, "k1", other)
	require.True(t, second.Replayed)
	require.Equal(t, first.CarrierLabelID, second.CarrierLabelID)
	require.Equal(t, first.TrackingNo, second.TrackingNo)
	require.Len(t, b.sim.Purchases(), 1)
}

func TestLabelsAreUnique(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	var tracking []string
	for i, key := range []string{"a", "b", "c"} {
		req := purchase(918273, "51147")
		req.ParcelNo = i + 1
		l := b.mustBuy(t, key, req)
		require.Equal(t, fmt.Sprintf("CL-%d", i+1), l.CarrierLabelID)
		tracking = append(tracking, l.TrackingNo)
	}
	require.Equal(t, []string{"GRD000918273", "GRD000918273-2", "GRD000918273-3"}, tracking)

	for _, tt := range []struct {
		orderID      int64
		service      string
		weight       int
		wantTracking string
		wantCost     int64
	}{
		{42, "express", 1000, "EXP000000042", 900 + 200},
		{43, "overnight", 1000, "OVN000000043", 1800 + 250},
		{44, "ground", 70000, "GRD000000044", 450 + 7000},
		{1234567890, "ground", 1, "GRD1234567890", 450},
	} {
		req := purchase(tt.orderID, "51147")
		req.Service, req.WeightG = tt.service, tt.weight
		l := b.mustBuy(t, fmt.Sprintf("order-%d", tt.orderID), req)
		require.Equal(t, tt.wantTracking, l.TrackingNo)
		require.Equal(t, tt.wantCost, l.CostCents)
		cost, ok := sim.Cost(tt.service, tt.weight)
		require.True(t, ok)
		require.Equal(t, tt.wantCost, cost)
	}
	_, ok := sim.Cost("teleport", 1)
	require.False(t, ok)
}

func TestNoKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{NoKeys: true})

	first := b.mustBuy(t, "k1", purchase(7, "51147"))
	second := b.mustBuy(t, "k1", purchase(7, "51147"))
	require.False(t, second.Replayed)
	require.Equal(t, "CL-1", first.CarrierLabelID)
	require.Equal(t, "CL-2", second.CarrierLabelID)
	require.Equal(t, "GRD000000007", first.TrackingNo)
	require.Equal(t, "GRD000000007-2", second.TrackingNo)
	require.Equal(t, map[string]int{"k1": 2}, b.sim.Stats().ByKey)

	// Without keys the header is not even required.
	status, _ := b.do(t, "POST", "/v1/labels", mustJSON(t, purchase(8, "51147")), "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, status)
	require.Len(t, b.sim.Purchases(), 3)

	inv := invoice(t, b, day)
	require.Len(t, inv, 3)
	for _, line := range inv {
		require.Empty(t, line["idempotency_key"], "a carrier without keys bills none")
	}
	require.Equal(t, "k1", b.sim.Purchases()[0].IdempotencyKey, "the key sent is still visible to tests")

	// Turned off again, a key dedupes from then on.
	o := b.sim.Options()
	o.NoKeys = false
	require.NoError(t, b.sim.SetOptions(o))
	l := b.mustBuy(t, "k2", purchase(9, "51147"))
	l2 := b.mustBuy(t, "k2", purchase(9, "51147"))
	require.True(t, l2.Replayed)
	require.Equal(t, l.CarrierLabelID, l2.CarrierLabelID)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestFailRate(t *testing.T) {
	t.Parallel()

	t.Run("Always", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{FailRate: 1})
		_, err := b.buy(t, "k1", purchase(1, "51147"))
		unknown := requireUnknown(t, err, http.StatusServiceUnavailable)
		require.Equal(t, time.Second, unknown.RetryAfter)
		require.Empty(t, b.sim.Purchases(), "a 503 buys nothing")
		require.Equal(t, int64(1), b.sim.Stats().Failed)
	})

	t.Run("SeededShareIsReproducible", func(t *testing.T) {
		t.Parallel()
		outcomes := func() string {
			b := setup(t, &sim.Options{FailRate: 0.5, Seed: 7})
			var sb strings.Builder
			for i := range 40 {
				_, err := b.buy(t, fmt.Sprintf("k%d", i), purchase(int64(i+1), "51147"))
				if err != nil {
					requireUnknown(t, err, http.StatusServiceUnavailable)
					sb.WriteByte('F')
				} else {
					sb.WriteByte('.')
				}
			}
			return sb.String()
		}
		first, second := outcomes(), outcomes()
		require.Equal(t, first, second)
		require.Contains(t, first, "F")
		require.Contains(t, first, ".")
	})
}

func TestDropReply(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{DropReplyRate: 1})

	_, err := b.buy(t, "k1", purchase(1, "51147"))
	requireUnknown(t, err, 0)
	bought := b.sim.Purchases()
	require.Len(t, bought, 1, "the label was bought although the reply was lost")
	require.Equal(t, int64(1), b.sim.Stats().Dropped)

	// Only the same key finds it again; a replay is never dropped.
	l := b.mustBuy(t, "k1", purchase(1, "51147"))
	require.True(t, l.Replayed)
	require.Equal(t, bought[0].CarrierLabelID, l.CarrierLabelID)
}

func TestTimeout(t *testing.T) {
	t.Parallel()

	t.Run("BuysAfterTheClientGaveUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{TimeoutRate: 1, TimeoutDelay: time.Hour})
		// The client gives up once its call is under way at the carrier (a
		// deadline could end it before the call even arrived).
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := b.buyInFlight(t, ctx, "k1", purchase(1, "51147"))
		cancel()
		err := <-done
		requireUnknown(t, err, 0)
		require.ErrorIs(t, err, context.Canceled)

		waitFor(t, func() bool { return len(b.sim.Purchases()) == 1 })
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		require.True(t, l.Replayed)
		require.Equal(t, "CL-1", l.CarrierLabelID)
		require.Equal(t, int64(1), b.sim.Stats().TimedOut)
	})

	t.Run("PatientClientGetsTheLabel", func(t *testing.T) {
		t.Parallel()
		const delay = 20 * time.Millisecond
		b := setup(t, &sim.Options{TimeoutRate: 1, TimeoutDelay: delay})
		start := time.Now()
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		require.False(t, l.Replayed)
		require.GreaterOrEqual(t, time.Since(start), delay)
	})

	t.Run("DefaultDelay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{TimeoutRate: 1})
		require.Equal(t, sim.DefaultTimeoutDelay, b.sim.Options().TimeoutDelay)
	})

	t.Run("CloseBuysWhatWasWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{TimeoutRate: 1, TimeoutDelay: time.Hour})
		done := b.buyInFlight(t, context.Background(), "k1", purchase(1, "51147"))
		require.NoError(t, b.sim.Close())
		require.NoError(t, <-done, "woken by Close, the purchase completes and answers")
		require.Len(t, b.sim.Purchases(), 1)

		_, err := b.buy(t, "k2", purchase(2, "51147"))
		requireUnknown(t, err, http.StatusServiceUnavailable)
	})
}

func TestInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{TimeoutRate: 1, TimeoutDelay: time.Hour})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := b.buyInFlight(t, ctx, "k1", purchase(1, "51147"))

	_, err := b.buy(t, "k1", purchase(1, "51147"))
	var inProgress *carrier.InProgressError
	require.ErrorAs(t, err, &inProgress)
	require.Equal(t, "in_progress", inProgress.Code)
	require.Equal(t, time.Second, inProgress.RetryAfter)

	cancel()
	<-done
	waitFor(t, func() bool { return len(b.sim.Purchases()) == 1 })
	l := b.mustBuy(t, "k1", purchase(1, "51147"))
	require.True(t, l.Replayed)
}

func TestLatency(t *testing.T) {
	t.Parallel()
	const latency = 30 * time.Millisecond
	b := setup(t, &sim.Options{Latency: latency, LatencyJitter: 10 * time.Millisecond})

	start := time.Now()
	b.mustBuy(t, "k1", purchase(1, "51147"))
	require.GreaterOrEqual(t, time.Since(start), latency)

	t.Run("ClientGoneDuringLatencyBuysNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{Latency: time.Hour})
		// The client leaves once its call has arrived (a deadline could end
		// it before the call even reached the carrier).
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := b.buyAsync(ctx, "k1", purchase(1, "51147"))
		waitFor(t, func() bool { return b.sim.Stats().Calls == 1 })
		cancel()
		requireUnknown(t, <-done, 0)
		require.Empty(t, b.sim.Purchases())
	})

	t.Run("CloseDuringLatencyAnswers503", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{Latency: time.Hour})
		result := b.buyAsync(context.Background(), "k1", purchase(1, "51147"))
		waitFor(t, func() bool { return b.sim.Stats().Calls == 1 })
		require.NoError(t, b.sim.Close())
		requireUnknown(t, <-result, http.StatusServiceUnavailable)
		require.Empty(t, b.sim.Purchases())
	})
}

func TestRejections(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{RejectPostalCode: "99999"})

	tests := []struct {
		name       string
		mutate     func(*carrier.PurchaseRequest)
		wantStatus int
		wantCode   string
	}{
		{"RejectedPostalCode", func(r *carrier.PurchaseRequest) { r.ShipTo.PostalCode = "99999" }, 422, "address_invalid"},
		{"MissingCity", func(r *carrier.PurchaseRequest) { r.ShipTo.City = " " }, 422, "address_invalid"},
		{"UnknownService", func(r *carrier.PurchaseRequest) { r.Service = "teleport" }, 422, "service_not_offered"},
		{"NoWeight", func(r *carrier.PurchaseRequest) { r.WeightG = 0 }, 422, "weight_invalid"},
		{"TooHeavy", func(r *carrier.PurchaseRequest) { r.WeightG = 70001 }, 422, "weight_invalid"},
		{"NoReference", func(r *carrier.PurchaseRequest) { r.Reference = "" }, 400, "bad_request"},
		{"NoOrder", func(r *carrier.PurchaseRequest) { r.OrderID = 0 }, 400, "bad_request"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := purchase(int64(i+1), "51147")
			tt.mutate(&req)
			_, err := b.buy(t, fmt.Sprintf("rej-%d", i), req)
			rej, ok := carrier.IsRejected(err)
			require.True(t, ok, "got %v", err)
			require.Equal(t, tt.wantStatus, rej.Status)
			require.Equal(t, tt.wantCode, rej.Code)
			require.NotEmpty(t, rej.Message)
		})
	}
	require.Empty(t, b.sim.Purchases())

	// A rejection is not remembered: the same key with a good address buys.
	l := b.mustBuy(t, "rej-0", purchase(1, "51147"))
	require.False(t, l.Replayed)

	t.Run("RawRequests", func(t *testing.T) {
		body := mustJSON(t, purchase(5, "51147"))
		status, got := b.do(t, "POST", "/v1/labels", body)
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, got, `"idempotency_key_invalid"`)

		status, got = b.do(t, "POST", "/v1/labels", body, "Idempotency-Key", "has space")
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, got, `"idempotency_key_invalid"`)

		status, got = b.do(t, "POST", "/v1/labels", `{"reference":`, "Idempotency-Key", "k")
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, got, `"bad_request"`)

		status, _ = b.do(t, "GET", "/v1/labels", "")
		require.Equal(t, http.StatusMethodNotAllowed, status)

		status, _ = b.do(t, "GET", "/v2/nothing", "")
		require.Equal(t, http.StatusNotFound, status)
	})
}

func TestToken(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{Token: "s3cret"})

	l := b.mustBuy(t, "k1", purchase(1, "51147"))
	require.Equal(t, "CL-1", l.CarrierLabelID)

	_, err := carrier.NewClient(b.url, nil).Buy(context.Background(), "k2", purchase(2, "51147"))
	requireUnknown(t, err, http.StatusUnauthorized)
	_, err = carrier.NewClient(b.url, &carrier.ClientOpts{Token: "wrong"}).Buy(context.Background(), "k2", purchase(2, "51147"))
	requireUnknown(t, err, http.StatusUnauthorized)
	require.Len(t, b.sim.Purchases(), 1)

	for _, path := range []string{"/sim/stats", "/sim/config", "/sim/purchases", "/v1/invoices?date=2026-12-02"} {
		status, _ := b.do(t, "GET", path, "")
		require.Equal(t, http.StatusUnauthorized, status, path)
		status, _ = b.do(t, "GET", path, "", "Authorization", "Bearer s3cret")
		require.Equal(t, http.StatusOK, status, path)
	}
	status, _ := b.do(t, "GET", "/healthz", "")
	require.Equal(t, http.StatusOK, status)

	status, body := b.do(t, "GET", "/sim/config", "", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, "s3cret", "the token is write-only")
}

func TestConfigEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{RejectPostalCode: "99999", Seed: 3})

	status, body := b.do(t, "GET", "/sim/config", "")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{
		"latency": "0s", "latency_jitter": "0s", "fail_rate": 0, "drop_reply_rate": 0,
		"timeout_rate": 0, "timeout_delay": "30s", "reject_postal_code": "99999", "no_keys": false,
		"seed": 3, "duplicate_line_rate": 0, "amount_change_rate": 0, "foreign_line_rate": 0, "credit_rate": 0
	}`, body)

	status, body = b.do(t, "POST", "/sim/config", `{"fail_rate": 1, "latency": "5ms", "timeout_delay": 2000000000}`)
	require.Equal(t, http.StatusOK, status, body)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, 1.0, got["fail_rate"])
	require.Equal(t, "5ms", got["latency"])
	require.Equal(t, "2s", got["timeout_delay"])
	require.Equal(t, "99999", got["reject_postal_code"], "fields left out keep their value")

	o := b.sim.Options()
	require.Equal(t, 5*time.Millisecond, o.Latency)
	require.Equal(t, 1.0, o.FailRate)
	_, err := b.buy(t, "k1", purchase(1, "51147"))
	requireUnknown(t, err, http.StatusServiceUnavailable)

	for _, bad := range []string{
		`{"fail_rate": 1.5}`,
		`{"latency": "-1s"}`,
		`{"latency": "soon"}`,
		`{"failrate": 1}`,
		`{"duplicate_line_rate": 0.6, "credit_rate": 0.6}`,
		`{"state_file": "/tmp/elsewhere"}`,
		`not json`,
	} {
		status, body := b.do(t, "POST", "/sim/config", bad)
		require.Equal(t, http.StatusBadRequest, status, bad)
		require.Contains(t, body, `"bad_config"`, bad)
	}
	require.Equal(t, 1.0, b.sim.Options().FailRate, "a refused config changes nothing")

	status, _ = b.do(t, "POST", "/sim/config", `{"fail_rate": 0, "latency": "0s"}`)
	require.Equal(t, http.StatusOK, status)
	b.mustBuy(t, "k1", purchase(1, "51147"))
}

func TestPurchasesStatsAndReset(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	b.mustBuy(t, "k1", purchase(1, "51147"))
	b.mustBuy(t, "k1", purchase(1, "51147"))

	status, body := b.do(t, "GET", "/sim/purchases", "")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `[{
		"carrier_label_id": "CL-1", "tracking_no": "GRD000000001", "idempotency_key": "k1",
		"reference": "lr_1", "order_id": 1, "parcel_no": 1, "service": "ground", "weight_g": 1450,
		"cost_cents": 595, "currency": "USD", "purchased_at": "2026-12-02T10:00:01Z"
	}]`, body)

	status, body = b.do(t, "GET", "/sim/stats", "")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"purchases": 1, "calls": 2, "by_key": {"k1": 1}, "replays": 1, "in_progress": 0,
		"failed": 0, "rejected": 0, "dropped": 0, "timed_out": 0, "in_flight": 0}`, body)

	status, _ = b.do(t, "POST", "/sim/reset", "")
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, b.sim.Purchases())
	st := b.sim.Stats()
	require.Zero(t, st.Calls)
	require.Empty(t, st.ByKey)

	l := b.mustBuy(t, "k1", purchase(1, "51147"))
	require.False(t, l.Replayed, "the key was forgotten")
	require.Equal(t, "CL-2", l.CarrierLabelID, "label ids are never reused")
	require.Equal(t, "GRD000000001", l.TrackingNo, "tracking numbers were forgotten with their labels")
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, o := range []sim.Options{
		{FailRate: -0.1},
		{DropReplyRate: 2},
		{TimeoutRate: 1.01},
		{Latency: -time.Second},
		{LatencyJitter: -1},
		{TimeoutDelay: -1},
		{CreditRate: 0.5, ForeignLineRate: 0.6},
	} {
		_, err := sim.New(&o)
		require.Error(t, err, "%+v", o)
	}
	s, err := sim.New(nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func TestConcurrentBuysOfOneKeyBuyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, &sim.Options{Latency: time.Millisecond, LatencyJitter: 5 * time.Millisecond})

	var wg sync.WaitGroup
	ids := make(chan string, 20)
	for range 20 {
		wg.Go(func() {
			l, err := b.buy(t, "same", purchase(1, "51147"))
			var inProgress *carrier.InProgressError
			if err != nil && !errors.As(err, &inProgress) {
				t.Errorf("buy: %v", err)
				return
			}
			if l != nil {
				ids <- l.CarrierLabelID
			}
		})
	}
	wg.Wait()
	close(ids)
	for id := range ids {
		require.Equal(t, "CL-1", id)
	}
	require.Len(t, b.sim.Purchases(), 1)
}
