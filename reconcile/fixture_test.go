package reconcile_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/reconcile"
)

// day is the billing day of most tests; now is when their runs start: labels
// created on day before 06:00 are past the default grace, later ones are not.
var (
	day = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	now = time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
)

// seed is one intent as the worker leaves it: the intent, its key record and,
// when it succeeded, its label. The zero values of the options are the
// normal case (succeeded, completed key naming the label).
type seed struct {
	n          int // makes every id of the seed: caller key, request id, label id…
	caller     string
	createdAt  time.Time
	costCents  int64
	currency   string
	intent     string // "" (succeeded), "pending", "failed"
	key        string // "" (completed naming the label), "started", "purged", "other_label", "failed", "ghost"
	keyCreated time.Time
	// What the carrier answered, when a test bought the label for real.
	cl, trk string
}

func (s seed) callerID() string {
	if s.caller == "" {
		return "fulfilment"
	}
	return s.caller
}
func (s seed) idemKey() string    { return fmt.Sprintf("label:%d:1:v1", 918000+s.n) }
func (s seed) requestID() string  { return fmt.Sprintf("lr_%04d", s.n) }
func (s seed) labelID() string    { return fmt.Sprintf("lbl_%04d", s.n) }
func (s seed) carrierKey() string { return carrier.DeriveKey(s.callerID(), s.idemKey()) }
func (s seed) carrierLabel() string {
	if s.cl != "" {
		return s.cl
	}
	return fmt.Sprintf("CL-%d", 5500+s.n)
}
func (s seed) tracking() string {
	if s.trk != "" {
		return s.trk
	}
	return fmt.Sprintf("GRD%09d", 918000+s.n)
}
func (s seed) orderID() int64 { return int64(918000 + s.n) }
func (s seed) cost() int64 {
	if s.costCents == 0 {
		return 612
	}
	return s.costCents
}
func (s seed) cur() string {
	if s.currency == "" {
		return "USD"
	}
	return s.currency
}

// line is the invoice line of a normal charge for the seed.
func (s seed) line(lineNo int, billedAt time.Time) string {
	return fmt.Sprintf("INV-%s,%d,%s,%s,%s,%s,%s,%d,%s", billedAt.Format("20060102"), lineNo,
		billedAt.Format(time.RFC3339), s.carrierLabel(), s.tracking(), s.carrierKey(), s.requestID(), s.cost(), s.cur())
}

// labelBody is the Label JSON of api.md, as the worker saves it.
func labelBody(s seed, labelID string) []byte {
	return labels.Label{LabelID: labelID, OrderID: s.orderID(), ParcelNo: 1, LabelVersion: 1, Service: "ground",
		TrackingNo: s.tracking(), CarrierLabelID: s.carrierLabel(), CostCents: s.cost(), Currency: s.cur(), CreatedAt: s.createdAt}.Body()
}

// insertSeeds writes the seeds with COPY, as many as a benchmark needs.
func insertSeeds(t testing.TB, pool *pgxpool.Pool, seeds []seed) {
	t.Helper()
	ctx := context.Background()
	var intents, lbls, keys [][]any
	for _, s := range seeds {
		hash := sha256.Sum256([]byte(s.requestID()))
		intentAt := s.createdAt.Add(-time.Second)
		status, labelID, problem, completed := "succeeded", any(s.labelID()), any(nil), any(s.createdAt)
		switch s.intent {
		case "pending":
			status, labelID, completed = "pending", nil, nil
		case "failed":
			status, labelID, problem = "failed", nil, `{"status":502,"code":"carrier_unavailable"}`
		}
		if s.key == "ghost" {
			labelID = "lbl_ghost_" + s.requestID()
		}
		intents = append(intents, []any{s.requestID(), s.callerID(), s.idemKey(), hash[:], int16(1),
			s.orderID(), int32(1), int32(1), `{}`, s.carrierKey(), status, labelID, problem,
			intentAt, completed})
		if status == "succeeded" && s.key != "ghost" {
			lbls = append(lbls, []any{s.labelID(), s.callerID(), s.requestID(), s.orderID(), int32(1), int32(1),
				"ground", s.tracking(), s.carrierLabel(), s.carrierKey(), s.cost(), s.cur(), s.idemKey(), s.createdAt, s.createdAt})
		}
		keyAt := intentAt
		if !s.keyCreated.IsZero() {
			keyAt = s.keyCreated
		}
		state, rstatus, body := "completed", any(int32(201)), any(string(labelBody(s, s.labelID())))
		switch {
		case s.key == "purged":
			continue
		case s.key == "started" || s.intent == "pending":
			state, rstatus, body = "started", nil, nil
		case s.key == "failed" || s.intent == "failed":
			rstatus, body = int32(502), `{"status":502,"code":"carrier_unavailable"}`
		case s.key == "other_label":
			body = string(labelBody(s, "lbl_other"))
		case s.key == "ghost":
			body = string(labelBody(s, "lbl_ghost_"+s.requestID()))
		}
		keys = append(keys, []any{s.callerID(), s.idemKey(), hash[:], int16(1), s.requestID(), state, rstatus, body,
			keyAt, keyAt.Add(24 * time.Hour)})
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"label_intents"}, []string{"request_id", "caller_id", "idem_key",
			"request_hash", "fingerprint_version", "order_id", "parcel_no", "label_version", "payload", "carrier_key",
			"status", "label_id", "error", "created_at", "completed_at"}, pgx.CopyFromRows(intents)); err != nil {
			return fmt.Errorf("intents: %w", err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"labels"}, []string{"label_id", "caller_id", "request_id", "order_id",
			"parcel_no", "label_version", "service", "tracking_no", "carrier_label_id", "carrier_key", "cost_cents",
			"currency", "created_by_key", "purchased_at", "created_at"}, pgx.CopyFromRows(lbls)); err != nil {
			return fmt.Errorf("labels: %w", err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"idempotency_keys"}, []string{"caller_id", "idem_key", "request_hash",
			"fingerprint_version", "request_id", "state", "response_status", "response_body", "created_at", "expires_at"},
			pgx.CopyFromRows(keys)); err != nil {
			return fmt.Errorf("keys: %w", err)
		}
		return nil
	})
	require.NoError(t, err)
}

// invoice joins CSV lines under the carrier.md header.
func invoice(lines ...string) string {
	return "invoice_no,line_no,billed_at,carrier_label_id,tracking_no,idempotency_key,reference,cost_cents,currency\n" +
		strings.Join(lines, "\n") + "\n"
}

// testBundle is what most tests need: a fresh database.
type testBundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, _ := dbtest.New(t)
	return &testBundle{ctx: context.Background(), pool: pool}
}

// setupOneLabel is setup with one label in the database, bought at 02:00
// on day.
func setupOneLabel(t *testing.T) (*testBundle, seed) {
	t.Helper()
	b := setup(t)
	s1 := seed{n: 1, createdAt: at("02:00:00")}
	insertSeeds(t, b.pool, []seed{s1})
	return b, s1
}

// run reconciles csv as of now with the default grace and stuck-after.
func (b *testBundle) run(t *testing.T, csv string, mod ...func(*reconcile.Opts)) *reconcile.Report {
	t.Helper()
	rep, err := b.try(csv, mod...)
	require.NoError(t, err)
	return rep
}

func (b *testBundle) try(csv string, mod ...func(*reconcile.Opts)) (*reconcile.Report, error) {
	opts := reconcile.Opts{
		Invoice:    strings.NewReader(csv),
		Source:     "invoice.csv",
		Grace:      reconcile.DefaultGrace,
		StuckAfter: reconcile.DefaultStuckAfter,
		NowFunc:    func() time.Time { return now },
	}
	for _, m := range mod {
		m(&opts)
	}
	return reconcile.Run(b.ctx, b.pool, opts)
}

// items reads every item of a run.
func (b *testBundle) items(t *testing.T, rep *reconcile.Report) []reconcile.Item {
	t.Helper()
	var out []reconcile.Item
	require.NoError(t, rep.Items(b.ctx, func(it *reconcile.Item) error {
		out = append(out, *it)
		return nil
	}))
	return out
}

// byWhat indexes items by "INV line N" or label id (for label items), key
// (for keys) or reference (for intents), with their category.
func byWhat(items []reconcile.Item) map[string]string {
	m := map[string]string{}
	for _, it := range items {
		var k string
		switch it.Subject {
		case reconcile.SubjectLine, reconcile.SubjectPair:
			k = fmt.Sprintf("%s/%d", it.InvoiceNo, it.LineNo)
		case reconcile.SubjectLabel:
			k = it.LabelID
		case reconcile.SubjectKey:
			k = "key " + it.IdempotencyKey
		case reconcile.SubjectIntent:
			k = "intent " + it.Reference
		}
		if _, dup := m[k]; dup {
			panic("two items for " + k)
		}
		m[k] = it.Category
	}
	return m
}

func counts(pairs ...any) map[string]int {
	m := map[string]int{}
	for _, c := range reconcile.Categories {
		m[c] = 0
	}
	for i := 0; i < len(pairs); i += 2 {
		m[pairs[i].(string)] = pairs[i+1].(int)
	}
	return m
}
