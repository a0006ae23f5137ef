package reconcile_test

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/reconcile"
)

// A carrier that ignores keys buys again on the retry after a lost reply: the
// invoice bills two labels for one intent, and we hold the second. The first
// is a duplicate charge; matched through the reference, since such a carrier
// bills no key.
func TestNoKeysDuplicatePurchase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := day.Add(10 * time.Hour)
	simulator, err := sim.New(&sim.Options{NoKeys: true, NowFunc: func() time.Time { return clock }})
	require.NoError(t, err)
	srv := httptest.NewServer(simulator)
	t.Cleanup(srv.Close)
	client := carrier.NewClient(srv.URL, nil)

	s := seed{n: 1}
	req := carrier.PurchaseRequest{Reference: s.requestID(), OrderID: s.orderID(), ParcelNo: 1, WeightG: 1450, Service: "ground",
		ShipTo: carrier.Address{Name: "A. Example", Line1: "1 Example Street", City: "Exampleton", PostalCode: "10115", Country: "DE"}}
	_, err = client.Buy(b.ctx, s.carrierKey(), req) // its reply is lost on the way back
	require.NoError(t, err)
	clock = clock.Add(5 * time.Second)
	second, err := client.Buy(b.ctx, s.carrierKey(), req) // the retry, same key: bought again
	require.NoError(t, err)
	require.False(t, second.Replayed, "a carrier without keys does not replay")

	s.createdAt, s.cl, s.trk, s.costCents = clock.Add(time.Second), second.CarrierLabelID, second.TrackingNo, second.CostCents
	insertSeeds(t, b.pool, []seed{s})

	csv, err := client.Invoice(b.ctx, day)
	require.NoError(t, err)
	rep, err := reconcile.Run(b.ctx, b.pool, reconcile.Opts{
		Invoice: bytes.NewReader(csv), Source: "carrier:2026-12-02", Day: day,
		Grace: reconcile.DefaultGrace, StuckAfter: reconcile.DefaultStuckAfter,
		NowFunc: func() time.Time { return now },
	})
	require.NoError(t, err)
	require.Equal(t, counts(reconcile.Matched, 1, reconcile.DuplicateCharge, 1), rep.Counts)
	items := b.items(t, rep)
	require.Len(t, items, 2)
	require.Equal(t, reconcile.Matched, items[0].Category)
	require.Equal(t, second.CarrierLabelID, items[0].CarrierLabelID, "the label we hold is the matched charge")
	require.Equal(t, reconcile.SubjectPair, items[0].Subject)
	dup := items[1]
	require.Equal(t, reconcile.DuplicateCharge, dup.Category)
	require.Equal(t, "lbl_0001", dup.LabelID)
	require.Equal(t, "reference", dup.MatchedBy)
	require.Equal(t, "fulfilment", dup.CallerID)
	require.Equal(t, s.idemKey(), dup.IdempotencyKey)
	require.Equal(t, "duplicate of INV-20261202 line 2", dup.Detail)
	require.Equal(t, second.CostCents, *dup.AmountCents)
}

// A synthetic invoice with every kind of billing error, against the labels
// behind it: the counts are the simulator's truth.
func TestSyntheticInvoice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var csv bytes.Buffer
	mix := sim.BillingMix{DuplicateLineRate: 0.03, AmountChangeRate: 0.03, ForeignLineRate: 0.02, CreditRate: 0.02}
	truth, err := sim.WriteSyntheticInvoice(&csv, day, 3000, mix, 7)
	require.NoError(t, err)
	require.NotZero(t, truth.Duplicates*truth.AmountChanges*truth.Foreign*truth.Credits, "every kind of error drawn")

	seeds := make([]seed, len(truth.Labels))
	for i, l := range truth.Labels {
		seeds[i] = seed{n: i + 1, caller: l.CallerID, createdAt: l.PurchasedAt.Add(time.Second),
			cl: l.CarrierLabelID, trk: l.TrackingNo, costCents: l.CostCents}
	}
	insertSeeds(t, b.pool, seeds)
	// The seeds derive their own keys and references; the invoice must carry
	// theirs, so rewrite the truth's into the seeds' before importing.
	invoice := csv.String()
	for i, l := range truth.Labels {
		invoice = strings.ReplaceAll(invoice, l.IdempotencyKey, seeds[i].carrierKey())
		invoice = strings.ReplaceAll(invoice, ","+l.Reference+",", ","+seeds[i].requestID()+",")
	}

	rep := b.run(t, invoice, func(o *reconcile.Opts) { o.Grace = 0 })
	require.Equal(t, truth.Lines, rep.LinesRead)
	require.Equal(t, counts(
		reconcile.Matched, truth.Matched+3*truth.Credits+truth.Duplicates,
		reconcile.DuplicateCharge, truth.Duplicates,
		reconcile.AmountMismatch, truth.AmountChanges,
		reconcile.BilledWithoutLabel, truth.Foreign), rep.Counts)
	require.Equal(t, map[string]int64{"USD": int64(truth.AmountChanges) * sim.AmountChangeCents}, rep.Amounts[reconcile.AmountMismatch])
}
