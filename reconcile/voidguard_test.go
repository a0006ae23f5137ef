package reconcile_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/reconcile"
)

// The void's guard finds every intent that may still receive a carrier
// label, not only the one the line's reference names: by the line's carrier
// key, and by the reference or carrier key of another line billing the same
// carrier label. While such an intent is pending the label is kept; the job
// checks again, with the claims the plan saved, just before its call.
func TestVoidGuardFindsEveryIntentThatMayReceiveTheLabel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1 := seed{n: 1, createdAt: at("02:00:00"), intent: "pending"} // bought under its key, reply lost, retrying
	s2 := seed{n: 2, createdAt: at("02:10:00"), intent: "pending"}
	s3 := seed{n: 3, createdAt: at("02:20:00"), intent: "failed"} // bought, reply lost, saved 502
	insertSeeds(t, b.pool, []seed{s1, s2, s3})
	line := func(lineNo int, cl, key, ref string) string {
		return fmt.Sprintf("INV-20261202,%d,%s,%s,GRD%d,%s,%s,612,USD", lineNo, at("03:00:00").Add(time.Duration(lineNo)*time.Second).Format(time.RFC3339),
			cl, lineNo, key, ref)
	}
	rep := b.run(t, invoice(
		// s1's label billed twice under its carrier key, with no reference.
		line(1, "CL-X1", s1.carrierKey(), ""), line(2, "CL-X1", s1.carrierKey(), ""),
		// s2's label billed with its reference, and again with nothing but
		// the carrier label id.
		line(3, "CL-X2", s2.carrierKey(), s2.requestID()), line(4, "CL-X2", "", ""),
		// s3's, its intent final.
		line(5, "CL-X3", s3.carrierKey(), s3.requestID()),
	))
	require.Equal(t, 1, rep.Counts[reconcile.DuplicateCharge], "%v", rep.Counts)
	require.Equal(t, 4, rep.Counts[reconcile.BilledWithoutLabel], "%v", rep.Counts)

	dup, err := reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, DryRun: true})
	require.NoError(t, err)
	require.Len(t, dup.Items, 1)
	require.Equal(t, reconcile.VoidKept, dup.Items[0].Outcome)
	require.Equal(t, "the intent lr_0001 (named by the line's carrier key) is still pending: its next attempt may record CL-X1; decided again once it is final",
		dup.Items[0].Detail)

	var q enqueued
	bwl, err := reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, Category: reconcile.BilledWithoutLabel, Enqueue: q.fn})
	require.NoError(t, err)
	details := map[int]string{}
	for _, it := range bwl.Items {
		details[it.LineNo] = it.Outcome + ": " + it.Detail
	}
	require.Equal(t, map[int]string{
		1: "kept: the intent lr_0001 (named by the line's carrier key) is still pending: its next attempt may record CL-X1; decided again once it is final",
		3: "kept: the intent lr_0002 (named by the line's reference) is still pending: its next attempt may record CL-X2; decided again once it is final",
		4: "kept: the intent lr_0002 (named by the reference of another line billing it) is still pending: its next attempt may record CL-X2; decided again once it is final",
		5: reconcile.VoidPending + ": no answer yet: the void job is queued or retrying; run the command again to see its outcome",
	}, details)
	require.Equal(t, []string{"CL-X3"}, q.got())

	// The job checks again with what the plan saw: the line's reference and
	// carrier key, and those of every line billing the label.
	a, ok, err := reconcile.TakeVoidAttempt(b.ctx, b.pool, "CL-X3")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, s3.requestID(), a.Reference)
	require.Equal(t, s3.carrierKey(), a.CarrierKey)
	require.Equal(t, []string{s3.requestID()}, a.ClaimRefs)
	require.Equal(t, []string{s3.carrierKey()}, a.ClaimKeys)
	reason, err := reconcile.GuardVoid(b.ctx, b.pool, a)
	require.NoError(t, err)
	require.Empty(t, reason, "the only intent named is failed")

	// Meanwhile an intent under the same carrier key is accepted again (the
	// caller reused its key after the record was purged): it would receive
	// CL-X3 from the carrier, so the job refuses.
	_, err = b.pool.Exec(b.ctx, `
		INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no,
		                           label_version, payload, carrier_key, status, created_at)
		SELECT 'lr_again', caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no,
		       label_version, payload, carrier_key, 'pending', now()
		  FROM label_intents WHERE request_id = $1`, s3.requestID())
	require.NoError(t, err)
	reason, err = reconcile.GuardVoid(b.ctx, b.pool, a)
	require.NoError(t, err)
	require.Equal(t, "the intent lr_again (named by the line's carrier key) is still pending: its next attempt may record CL-X3; decided again once it is final", reason)
}
