package reconcile_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/reconcile"
)

// A carrier that numbers its labels again from CL-1 (a simulator restarted
// without its state file, a real carrier recycling ids, two accounts) bills
// a new request under the carrier label ids of older, unrelated labels of
// ours. A line whose reference or carrier key names one request never
// matches another request's label by carrier label id (or tracking number):
// it finds its own request's label if there is one, and is reported
// carrier_id_conflict if there is none; the run exits 1 either way.
func TestCarrierIDNeverMatchesAnotherRequestsLabel(t *testing.T) {
	t.Parallel()
	// Two labels bought the day before (in the window, not in the period, so
	// not reported), when the carrier's numbering was at CL-1 and CL-2.
	older := []seed{
		{n: 1, createdAt: day.Add(-14 * time.Hour), cl: "CL-1"},
		{n: 2, createdAt: day.Add(-13 * time.Hour), cl: "CL-2"},
	}
	// The new request (reference lr_0003) bought twice by a carrier without
	// keys after its restart: CL-1, then CL-2 again.
	line := func(lineNo int, cl, trk, key, ref string) string {
		return fmt.Sprintf("INV-20261202,%d,%s,%s,%s,%s,%s,612,USD", lineNo, at("10:00:00").Add(time.Duration(lineNo)*time.Second).Format(time.RFC3339),
			cl, trk, key, ref)
	}

	t.Run("TheRequestHoldsALabel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// It holds the second purchase, CL-2; created after the grace's
		// start, so that unbilled it would not be reported.
		r := seed{n: 3, createdAt: at("10:00:05"), cl: "CL-2", trk: "GRD000918003-2"}
		insertSeeds(t, b.pool, append(older, r))
		rep := b.run(t, invoice(
			line(1, "CL-1", "GRD000918003", "", r.requestID()),
			line(2, "CL-2", "GRD000918003-2", "", r.requestID()),
		))
		require.Equal(t, counts(reconcile.Matched, 1, reconcile.DuplicateCharge, 1), rep.Counts,
			"the duplicate purchase is found, not two matches against older labels")
		require.Equal(t, 1, rep.ExitCode())
		items := b.items(t, rep)
		require.Len(t, items, 2)
		for _, it := range items {
			require.Equal(t, r.labelID(), it.LabelID, "line %d matched to another request's label", it.LineNo)
		}
		require.Equal(t, reconcile.DuplicateCharge, items[1].Category)
		require.Equal(t, 1, items[1].LineNo)
		require.Equal(t, "reference", items[1].MatchedBy)
		require.Equal(t, "duplicate of INV-20261202 line 2", items[1].Detail)
	})

	t.Run("TheRequestHoldsNone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Its reply was lost and it is still retrying: no label yet.
		r := seed{n: 3, createdAt: at("10:00:05"), intent: "pending"}
		insertSeeds(t, b.pool, append(older, r))
		// One line names the request by reference, the other (a carrier that
		// echoes no reference) by its carrier key.
		rep := b.run(t, invoice(
			line(1, "CL-1", "GRD000918003", "", r.requestID()),
			line(2, "CL-2", "GRD000918003-2", r.carrierKey(), ""),
		))
		require.Equal(t, counts(reconcile.CarrierIDConflict, 2, reconcile.StuckIntent, 1), rep.Counts, "never matched to the older labels")
		require.Equal(t, 1, rep.ExitCode())
		items := b.items(t, rep)
		require.Len(t, items, 3)
		require.Equal(t, reconcile.StuckIntent, items[0].Category)
		items = items[1:]
		for _, it := range items {
			require.Equal(t, reconcile.CarrierIDConflict, it.Category)
			require.Empty(t, it.LabelID)
			require.Equal(t, int64(612), *it.AmountCents)
		}
		require.Equal(t, "CL-1 is the carrier label of label lbl_0001 (request lr_0001), not of request lr_0003 that the line's reference names: not matched; the intent lr_0003 is pending",
			items[0].Detail)
		require.Equal(t, "fulfilment", items[0].CallerID, "the request the reference names leads to its caller")
		require.Equal(t, r.idemKey(), items[0].IdempotencyKey)
		require.Equal(t, "CL-2 is the carrier label of label lbl_0002 (request lr_0002), bought under another carrier key than the line's: not matched",
			items[1].Detail)
	})
}
