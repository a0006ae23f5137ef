package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/reconcile"
	"github.com/labelkit/labels/worker"
)

// gatedCarrier is the real carrier client, whose purchase calls after the
// first wait at a gate the test opens: the first attempt reaches the
// carrier (whose reply the simulator drops), the retries wait, so the intent
// stays pending, retrying, for as long as the test needs.
type gatedCarrier struct {
	*carrier.Client
	mu       sync.Mutex
	calls    int
	held     chan struct{} // closed when a retry waits at the gate
	open     chan struct{} // closed by Open
	heldOnce sync.Once
	openOnce sync.Once
}

func newGatedCarrier(url string) *gatedCarrier {
	return &gatedCarrier{Client: carrier.NewClient(url, nil), held: make(chan struct{}), open: make(chan struct{})}
}

func (g *gatedCarrier) Buy(ctx context.Context, key string, req carrier.PurchaseRequest) (*carrier.Label, error) {
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	if n > 1 {
		g.heldOnce.Do(func() { close(g.held) })
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, &carrier.UnknownOutcomeError{Err: ctx.Err()}
		}
	}
	return g.Client.Buy(ctx, key, req)
}

// Open lets every purchase call through.
func (g *gatedCarrier) Open() { g.openOnce.Do(func() { close(g.open) }) }

// inFlightStack is a stack whose simulator drops the reply of its first
// purchase, with a worker buying through g: the purchase is made under the
// intent's carrier key, its answer lost, and the intent retries at the gate.
func inFlightStack(t *testing.T) (*stacktest.SimStack, *gatedCarrier) {
	t.Helper()
	seed, ok := sim.SeedDroppingFirstReply(0.5)
	require.True(t, ok)
	s := stacktest.NewSim(t, stacktest.SimOpts{NoWorker: true, Sim: sim.Options{DropReplyRate: 0.5, Seed: seed}})
	g := newGatedCarrier(s.CarrierURL)
	ctx, cancel := context.WithCancel(context.Background())
	// Long carrier timeout and lease, many attempts: whatever the machine's
	// load, the intent is still pending when the gate opens.
	w, err := worker.New(worker.Config{
		Pool: s.Pool, Carrier: g, CarrierTimeout: time.Minute, LeaseDuration: 2 * time.Minute, MaxAttempts: 1000,
		RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond, Concurrency: 4, SweepInterval: -1,
		FetchCooldown: 20 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond, RelayPollInterval: 50 * time.Millisecond,
		TestOnly: true, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		g.Open()
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = w.Stop(sctx)
		cancel()
	})
	return s, g
}

// inFlightKey is the idempotency key acceptInFlight sends inFlightParcel with.
const inFlightKey = "label:918274:1:v1"

// acceptInFlight starts an inFlightStack and has its caller's token send
// inFlightParcel under inFlightKey; it returns once the intent is accepted,
// its purchase made, the reply lost, and the retry waiting at the gate.
func acceptInFlight(t *testing.T) (*stacktest.SimStack, *gatedCarrier, string) {
	t.Helper()
	s, g := inFlightStack(t)
	tok := s.Token("fulfilment")
	status, _, body := post(t, s, tok, inFlightKey, 0)
	require.Equal(t, http.StatusAccepted, status, string(body))
	<-g.held
	return s, g, tok
}

var inFlightParcel = labels.Parcel{
	OrderID: 918274, ParcelNo: 1, WeightG: 1450, Service: "ground", LabelVersion: 1,
	ShipTo: labels.Address{Name: "A. Example", Line1: "1 Example Street", City: "Exampleton", PostalCode: "10115", Country: "DE"},
}

// post sends POST /v1/labels, with Prefer: wait=N when wait > 0.
func post(t *testing.T, s *stacktest.SimStack, token, key string, wait int) (int, http.Header, []byte) {
	t.Helper()
	body, err := json.Marshal(inFlightParcel)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/labels", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	if wait > 0 {
		req.Header.Set("Prefer", fmt.Sprintf("wait=%d", wait))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// final repeats the request, waiting, until its outcome is final.
func final(t *testing.T, s *stacktest.SimStack, token, key string) (int, http.Header, []byte) {
	t.Helper()
	for range 30 {
		status, h, b := post(t, s, token, key, 10)
		if status != http.StatusAccepted {
			return status, h, b
		}
	}
	t.Fatal("the intent stayed pending through 30 waits of 10 s")
	return 0, nil, nil
}

// The scenario: the carrier sold a label under an intent's carrier
// key, its answer was lost, and the intent is still pending (retrying).
// The invoice bills the label twice with an empty reference; reconcile
// reports a duplicate_charge. `reconcile void` keeps the label (the pending
// intent's carrier key names it), so the retry gets a live label, and the
// caller's replay answers 201 with a label that ships. Once the intent is
// final, the next void decides again: the label is ours, kept.
func TestVoidKeepsALabelAnIntentInFlightCanReceive(t *testing.T) {
	t.Parallel()
	s, g, tok := acceptInFlight(t)
	const key = inFlightKey

	bought := s.Sim.Purchases()
	require.Len(t, bought, 1)
	p := bought[0]
	require.Equal(t, carrier.DeriveKey(callerID(t, s), key), p.IdempotencyKey, "bought under the intent's carrier key")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents WHERE status = 'pending'`))

	// The carrier bills it twice, with an empty reference.
	day := p.PurchasedAt.UTC().Truncate(24 * time.Hour)
	line := func(n int) string {
		return fmt.Sprintf("INV-%s,%d,%s,%s,%s,%s,,%d,%s", day.Format("20060102"), n,
			p.PurchasedAt.Add(time.Duration(n)*time.Second).UTC().Format(time.RFC3339), p.CarrierLabelID, p.TrackingNo,
			p.IdempotencyKey, p.CostCents, p.Currency)
	}
	csv := "invoice_no,line_no,billed_at,carrier_label_id,tracking_no,idempotency_key,reference,cost_cents,currency\n" +
		line(1) + "\n" + line(2) + "\n"
	rep, err := reconcile.Run(context.Background(), s.Pool, reconcile.Opts{
		Invoice: bytes.NewReader([]byte(csv)), Source: "invoice.csv", Day: day,
		Grace: reconcile.DefaultGrace, StuckAfter: reconcile.DefaultStuckAfter,
	})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[reconcile.DuplicateCharge], "%v", rep.Counts)

	void := voidRun(t, s, rep.RunID)
	require.Len(t, void.Items, 1)
	it := void.Items[0]
	require.Equal(t, reconcile.VoidKept, it.Outcome, "a label the pending intent can still receive is never voided: %s", it.Detail)
	require.Contains(t, it.Detail, "is still pending")
	require.Contains(t, it.Detail, "carrier key")
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM river_job WHERE kind = 'void_label'`))
	require.Nil(t, s.Sim.Purchases()[0].VoidedAt)

	// The retry gets the label, live; the caller's replay ships it.
	g.Open()
	status, _, body := final(t, s, tok, key)
	require.Equal(t, http.StatusCreated, status, string(body))
	var label labels.Label
	require.NoError(t, json.Unmarshal(body, &label))
	require.Equal(t, p.CarrierLabelID, label.CarrierLabelID)
	status, h, body := post(t, s, tok, key, 0)
	require.Equal(t, http.StatusCreated, status, string(body))
	require.Equal(t, "true", h.Get("Idempotent-Replayed"))
	require.Nil(t, s.Sim.Purchases()[0].VoidedAt, "the label handed to the caller is live")
	require.Zero(t, s.Sim.Stats().Voids)

	// The intent is final: the next void decides again, and keeps the label
	// the caller holds.
	again := voidRun(t, s, rep.RunID)
	require.Equal(t, reconcile.VoidKept, again.Items[0].Outcome)
	require.Equal(t, fmt.Sprintf("label %s holds %s", label.LabelID, p.CarrierLabelID), again.Items[0].Detail)
	require.Zero(t, s.Sim.Stats().Voids)
}

// The carrier voided the label an intent's key bought (someone voided it at
// the carrier) while the intent retried: the carrier's replay says so, and
// the worker fails the intent with 422 carrier_rejected, carrier_code
// label_voided, instead of handing the caller a dead label.
func TestWorkerNeverRecordsAVoidedLabel(t *testing.T) {
	t.Parallel()
	s, g, tok := acceptInFlight(t)
	const key = inFlightKey

	p := s.Sim.Purchases()[0]
	_, err := carrier.NewClient(s.CarrierURL, nil).Void(context.Background(), carrier.DeriveVoidKey(p.CarrierLabelID), p.CarrierLabelID)
	require.NoError(t, err)

	g.Open()
	status, _, body := final(t, s, tok, key)
	require.Equal(t, http.StatusUnprocessableEntity, status, "no label for a voided carrier label: %s", body)
	var prob labels.Problem
	require.NoError(t, json.Unmarshal(body, &prob))
	require.Equal(t, labels.CodeCarrierRejected, prob.Code)
	require.Equal(t, labels.CarrierCodeLabelVoided, prob.CarrierCode)
	require.Contains(t, prob.CarrierMessage, p.CarrierLabelID)
	require.Contains(t, prob.Detail, "new key")
	require.Zero(t, s.Count(`SELECT count(*) FROM labels`), "no label recorded")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents WHERE status = 'failed'`))

	status, h, replay := post(t, s, tok, key, 0)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "true", h.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(body), string(replay))
	require.Len(t, s.Sim.Purchases(), 1, "nothing bought again")
}

// callerID is the id of the stack's one caller.
func callerID(t *testing.T, s *stacktest.SimStack) string {
	t.Helper()
	var id string
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT caller_id FROM callers`).Scan(&id))
	return id
}
