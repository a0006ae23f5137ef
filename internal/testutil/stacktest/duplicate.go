package stacktest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/reconcile"
)

// DuplicateParcel is the parcel [NewDuplicate] buys.
var DuplicateParcel = client.Parcel{
	OrderID: 918273, ParcelNo: 1, WeightG: 1450, Service: "ground",
	ShipTo: client.Address{Name: "A. Example", Line1: "1 Example Street", City: "Exampleton", PostalCode: "10115", Country: "DE"},
}

// NewDuplicate starts a stack whose carrier ignores keys (o.Sim's NoKeys,
// DropReplyRate and Seed are set) and drops the reply of its first purchase,
// and buys [DuplicateParcel] through the API: the worker's retry buys the
// label a second time, as a carrier without keys does. It returns the stack
// and the label we hold; the carrier sold two.
func NewDuplicate(t testing.TB, o SimOpts) (*SimStack, *client.Label) {
	t.Helper()
	seed, ok := sim.SeedDroppingFirstReply(0.5)
	require.True(t, ok)
	o.Sim.NoKeys, o.Sim.DropReplyRate, o.Sim.Seed = true, 0.5, seed
	s := NewSim(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	label, err := client.New(s.URL, s.Token("fulfilment")).CreateLabel(ctx, DuplicateParcel)
	require.NoError(t, err)
	require.Len(t, s.Sim.Purchases(), 2, "the carrier sold the parcel twice")
	return s, label
}

// Invoice is the simulator's invoice of the day of its first purchase.
func (s *SimStack) Invoice() (day time.Time, csv []byte) {
	s.T.Helper()
	day = s.Sim.Purchases()[0].PurchasedAt.UTC().Truncate(24 * time.Hour)
	var inv bytes.Buffer
	require.NoError(s.T, s.Sim.WriteInvoice(&inv, day))
	return day, inv.Bytes()
}

// Reconcile reconciles [SimStack.Invoice] with the default grace and
// stuck-after, and returns the saved run.
func (s *SimStack) Reconcile() *reconcile.Report {
	s.T.Helper()
	day, csv := s.Invoice()
	rep, err := reconcile.Run(context.Background(), s.Pool, reconcile.Opts{
		Invoice: bytes.NewReader(csv), Source: "carrier:" + day.Format(time.DateOnly), Day: day,
		Grace: reconcile.DefaultGrace, StuckAfter: reconcile.DefaultStuckAfter,
	})
	require.NoError(s.T, err)
	return rep
}
