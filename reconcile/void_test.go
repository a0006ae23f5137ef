package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/reconcile"
)

// invoiceCT joins CSV lines under the header with the charge_type column.
func invoiceCT(lines ...string) string {
	header, _, _ := strings.Cut(invoice(), "\n")
	return header + ",charge_type\n" + strings.Join(lines, "\n") + "\n"
}

// dupLine bills, under s's reference and no key (a carrier without keys), a
// second purchase of s's parcel: carrier label cl.
func dupLine(s seed, invoiceDay time.Time, lineNo int, billedAt time.Time, cl string) string {
	return fmt.Sprintf("INV-%s,%d,%s,%s,%s-2,,%s,%d,USD", invoiceDay.Format("20060102"), lineNo,
		billedAt.Format(time.RFC3339), cl, s.tracking(), s.requestID(), s.cost())
}

// creditLine is the void credit of carrier label cl, billed for s.
func creditLine(s seed, invoiceDay time.Time, lineNo int, billedAt time.Time, cl string) string {
	return fmt.Sprintf("INV-%s,%d,%s,%s,%s-2,,%s,-%d,USD,void_credit", invoiceDay.Format("20060102"), lineNo,
		billedAt.Format(time.RFC3339), cl, s.tracking(), s.requestID(), s.cost())
}

// enqueued collects what Void enqueues.
type enqueued struct {
	mu  sync.Mutex
	ids []string
}

func (e *enqueued) fn(_ context.Context, _ pgx.Tx, ids []string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ids = append(e.ids, ids...)
	return nil
}

func (e *enqueued) got() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.ids...)
}

func outcomes(rep *reconcile.VoidReport) map[string]string {
	m := map[string]string{}
	for _, it := range rep.Items {
		m[fmt.Sprintf("%s/%d", it.InvoiceNo, it.LineNo)] = it.Outcome
	}
	return m
}

func tableCount(t *testing.T, b *testBundle, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// The void plan: what each category voids, and the temptations it leaves
// alone, each with its reason.
func TestVoidPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := map[int]seed{}
	for _, sd := range []seed{
		{n: 1, createdAt: at("02:00:00")},                    // bought twice by a carrier without keys
		{n: 2, createdAt: at("02:10:00")},                    // its own carrier label billed twice
		{n: 3, createdAt: at("02:20:00"), key: "ghost"},      // a completed key names CL-5503, no label does
		{n: 4, createdAt: at("02:30:00"), intent: "pending"}, // bought, reply lost, still retrying
		{n: 5, createdAt: at("02:40:00"), intent: "failed"},  // bought, reply lost, saved 502
	} {
		s[sd.n] = sd
	}
	insertSeeds(t, b.pool, mapValues(s))
	l := func(n, lineNo int) string { return s[n].line(lineNo, s[n].createdAt.Add(time.Second)) }
	csv := invoice(
		l(1, 1),
		dupLine(s[1], day, 2, at("02:00:05"), "CL-9001"),
		l(2, 3), l(2, 4),
		l(3, 5), l(3, 6),
		l(4, 7),
		l(5, 8),
		"INV-20261202,9,2026-12-02T03:00:00Z,CL-F1,GRD777-X,,,845,USD",
	)
	rep := b.run(t, csv)
	require.Equal(t, 3, rep.Counts[reconcile.DuplicateCharge], "%v", rep.Counts)
	require.Equal(t, 4, rep.Counts[reconcile.BilledWithoutLabel], "%v", rep.Counts)

	// Dry run: the plan, and nothing written.
	never := func(context.Context, pgx.Tx, []string) error { return errors.New("a dry run enqueues nothing") }
	dry, err := reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, DryRun: true, Enqueue: never})
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"INV-20261202/2": reconcile.VoidWouldVoid,
		"INV-20261202/4": reconcile.VoidKept,
		"INV-20261202/6": reconcile.VoidKept,
	}, outcomes(dry))
	details := map[string]string{}
	for _, it := range dry.Items {
		details[fmt.Sprintf("%d", it.LineNo)] = it.Detail
	}
	require.Equal(t, "label lbl_0002 holds CL-5502", details["4"], "the label's own carrier label billed twice: a billing error, never voided")
	require.Equal(t, "the completed key label:918003:1:v1 of caller fulfilment names CL-5503", details["6"])
	require.Equal(t, 1, dry.Targets())
	require.Equal(t, 0, dry.ExitCode())
	require.Zero(t, tableCount(t, b, "reconcile_voids"))
	require.Zero(t, tableCount(t, b, "reconcile_void_items"))

	// For real: CL-9001 is asked for, once however often.
	var q enqueued
	first, err := reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, Enqueue: q.fn})
	require.NoError(t, err)
	require.Equal(t, []string{"CL-9001"}, q.got())
	require.Equal(t, reconcile.VoidPending, outcomes(first)["INV-20261202/2"], "no job ran: no answer")
	require.Equal(t, 1, first.ExitCode())
	var key, category, cur string
	var cents int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT void_key, category, charge_cents, currency FROM reconcile_voids WHERE carrier_label_id = 'CL-9001'`).
		Scan(&key, &category, &cents, &cur))
	require.Equal(t, carrier.DeriveVoidKey("CL-9001"), key)
	require.Equal(t, reconcile.DuplicateCharge, category)
	require.Equal(t, int64(612), cents)
	require.Equal(t, 1, tableCount(t, b, "reconcile_void_items"))

	a, ok, err := reconcile.TakeVoidAttempt(b.ctx, b.pool, "CL-9001")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, reconcile.VoidAttempt{CarrierLabelID: "CL-9001", VoidKey: key, Reference: "lr_0001",
		ClaimRefs: []string{"lr_0001"}, ClaimKeys: []string{}, ChargeCents: 612, Currency: "USD", Attempts: 1}, a)
	reason, err := reconcile.GuardVoid(b.ctx, b.pool, a)
	require.NoError(t, err)
	require.Empty(t, reason)
	voidedAt := time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC)
	recorded, err := reconcile.RecordVoid(b.ctx, b.pool, "CL-9001", reconcile.VoidResult{Outcome: reconcile.VoidVoided, Detail: "voided", VoidedAt: voidedAt, CreditCents: 612})
	require.NoError(t, err)
	require.True(t, recorded)
	recorded, err = reconcile.RecordVoid(b.ctx, b.pool, "CL-9001", reconcile.VoidResult{Outcome: reconcile.VoidFailed})
	require.NoError(t, err)
	require.False(t, recorded, "an outcome is recorded once")
	_, ok, err = reconcile.TakeVoidAttempt(b.ctx, b.pool, "CL-9001")
	require.NoError(t, err)
	require.False(t, ok, "nothing left to do")

	again, err := reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, Enqueue: q.fn})
	require.NoError(t, err)
	require.Equal(t, []string{"CL-9001"}, q.got(), "a rerun asks for nothing voided already")
	it := again.Items[0]
	require.Equal(t, reconcile.VoidVoided, it.Outcome)
	require.Equal(t, voidedAt, *it.VoidedAt)
	require.Equal(t, map[string]int64{"USD": 612}, again.Recovered)
	require.Equal(t, 0, again.ExitCode(), "every targeted label voided; the kept ones do not count")

	// billed_without_label: only what was bought under a key of ours and is
	// held by nothing of ours.
	bwl, err := reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, Category: reconcile.BilledWithoutLabel, Enqueue: q.fn})
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"INV-20261202/5": reconcile.VoidKept,
		"INV-20261202/7": reconcile.VoidKept,
		"INV-20261202/8": reconcile.VoidPending,
		"INV-20261202/9": reconcile.VoidKept,
	}, outcomes(bwl))
	for _, it := range bwl.Items {
		switch it.LineNo {
		case 5:
			require.Equal(t, "the completed key label:918003:1:v1 of caller fulfilment names CL-5503", it.Detail)
		case 7:
			require.Equal(t, "the intent lr_0004 (named by the line's reference) is still pending: its next attempt may record CL-5504; decided again once it is final", it.Detail)
		case 9:
			require.Equal(t, "billed without a carrier key, so not bought under one of ours", it.Detail)
		}
	}
	require.Equal(t, []string{"CL-9001", "CL-5505"}, q.got())

	// A failed void is asked for again; the guard refuses a label of ours
	// even when asked directly.
	_, err = reconcile.RecordVoid(b.ctx, b.pool, "CL-5505", reconcile.VoidResult{Outcome: reconcile.VoidFailed, Detail: "no answer"})
	require.NoError(t, err)
	dryAgain, err := reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, Category: reconcile.BilledWithoutLabel, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, reconcile.VoidWouldVoid, outcomes(dryAgain)["INV-20261202/8"])
	_, err = reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, Category: reconcile.BilledWithoutLabel, Enqueue: q.fn})
	require.NoError(t, err)
	require.Equal(t, []string{"CL-9001", "CL-5505", "CL-5505"}, q.got())
	reason, err = reconcile.GuardVoid(b.ctx, b.pool, reconcile.VoidAttempt{CarrierLabelID: "CL-5501"})
	require.NoError(t, err)
	require.Equal(t, "label lbl_0001 holds CL-5501", reason)

	_, err = reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID + 100, DryRun: true})
	require.ErrorIs(t, err, reconcile.ErrNoRun)
	_, err = reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: rep.RunID, Category: reconcile.AmountMismatch, DryRun: true})
	require.ErrorIs(t, err, reconcile.ErrVoidCategory)
}

// A void's credit nets against the charge of its carrier label: on the same
// invoice, on a later one with the charge outside the window (through the
// void asked for), and in a rerun of the charge's day once the credit is in.
func TestVoidCreditNetsItsCharge(t *testing.T) {
	t.Parallel()

	t.Run("OnTheSameInvoice", func(t *testing.T) {
		t.Parallel()
		b, s1 := setupOneLabel(t)
		first := b.run(t, invoice(s1.line(1, at("02:00:01")), dupLine(s1, day, 2, at("02:00:05"), "CL-9001")))
		require.Equal(t, counts(reconcile.Matched, 1, reconcile.DuplicateCharge, 1), first.Counts)

		// The day again, as the carrier bills it after the void: a tenth
		// column, the earlier lines unchanged.
		rep := b.run(t, invoiceCT(s1.line(1, at("02:00:01"))+",charge", dupLine(s1, day, 2, at("02:00:05"), "CL-9001")+",charge",
			creditLine(s1, day, 3, at("09:00:00"), "CL-9001")))
		require.Equal(t, 1, rep.LinesNew, "the lines billed before are the same lines")
		require.Equal(t, counts(reconcile.Matched, 1, reconcile.Voided, 2), rep.Counts)
		require.Zero(t, rep.Discrepancies())
		require.Equal(t, 0, rep.ExitCode())
		require.Equal(t, map[string]int64{"USD": 612}, rep.Amounts[reconcile.Voided], "the charge recovered")
		items := b.items(t, rep)
		require.Len(t, items, 3)
		require.Equal(t, reconcile.Matched, items[0].Category)
		require.Equal(t, "CL-5501", items[0].CarrierLabelID)
		require.Equal(t, reconcile.SubjectPair, items[0].Subject)
		charge, credit := items[1], items[2]
		require.Equal(t, reconcile.Voided, charge.Category)
		require.Equal(t, 2, charge.LineNo)
		require.Equal(t, "lbl_0001", charge.LabelID)
		require.Equal(t, "voided: credited on INV-20261202 line 3", charge.Detail)
		require.Equal(t, int64(612), *charge.AmountCents)
		require.Equal(t, reconcile.Voided, credit.Category)
		require.Equal(t, "the credit of the void of INV-20261202 line 2", credit.Detail)
		require.Equal(t, int64(0), *credit.AmountCents)
		require.Equal(t, int64(-612), *credit.BilledCents)

		var text bytes.Buffer
		require.NoError(t, rep.WriteText(b.ctx, &text))
		require.Contains(t, text.String(), "\nvoided                    2  USD 6.12\n")
		require.Contains(t, text.String(), "every item matched or voided: exit status 0")
		var js bytes.Buffer
		require.NoError(t, rep.WriteJSON(b.ctx, &js))
		var doc struct {
			Counts map[string]int `json:"counts"`
		}
		require.NoError(t, json.Unmarshal(js.Bytes(), &doc))
		require.Equal(t, 2, doc.Counts[reconcile.Voided])

		loaded, err := reconcile.Load(b.ctx, b.pool, rep.RunID)
		require.NoError(t, err)
		require.Equal(t, rep.Counts, loaded.Counts)
	})

	t.Run("OnALaterInvoice", func(t *testing.T) {
		t.Parallel()
		b, s1 := setupOneLabel(t)
		first := b.run(t, invoice(s1.line(1, at("02:00:01")), dupLine(s1, day, 2, at("02:00:05"), "CL-9001")))
		require.Equal(t, 1, first.Counts[reconcile.DuplicateCharge])
		var q enqueued
		_, err := reconcile.Void(b.ctx, b.pool, reconcile.VoidOpts{RunID: first.RunID, Enqueue: q.fn})
		require.NoError(t, err)
		_, err = reconcile.RecordVoid(b.ctx, b.pool, "CL-9001", reconcile.VoidResult{Outcome: reconcile.VoidVoided, VoidedAt: day.AddDate(0, 0, 10)})
		require.NoError(t, err)

		// Ten days later, far outside the window: the credit alone on its
		// invoice still finds the charge its void was asked for.
		later := day.AddDate(0, 0, 10)
		rep := b.run(t, invoiceCT(creditLine(s1, later, 1, later.Add(time.Hour), "CL-9001")),
			func(o *reconcile.Opts) { o.NowFunc = func() time.Time { return later.Add(72 * time.Hour) } })
		require.Equal(t, counts(reconcile.Voided, 1), rep.Counts)
		items := b.items(t, rep)
		require.Len(t, items, 1)
		require.Equal(t, "the credit of the void of INV-20261202 line 2", items[0].Detail)

		// And the charge's day, run again, shows the charge voided.
		rerun := b.run(t, invoice(s1.line(1, at("02:00:01")), dupLine(s1, day, 2, at("02:00:05"), "CL-9001")))
		require.Equal(t, counts(reconcile.Matched, 1, reconcile.Voided, 1), rerun.Counts)
		items = b.items(t, rerun)
		require.Equal(t, fmt.Sprintf("voided: credited on INV-%s line 1", later.Format("20060102")), items[1].Detail)
	})

	t.Run("ACreditWithoutItsChargeIsNotVoided", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		later := day.AddDate(0, 0, 10)
		rep := b.run(t, invoiceCT(fmt.Sprintf("INV-%s,1,%s,CL-7,GRD7,,,-500,USD,void_credit", later.Format("20060102"),
			later.Add(time.Hour).Format(time.RFC3339))), func(o *reconcile.Opts) { o.NowFunc = func() time.Time { return later.Add(72 * time.Hour) } })
		require.Equal(t, counts(reconcile.BilledWithoutLabel, 1), rep.Counts, "a credit nothing of ours is behind is reported as any line")
	})

	t.Run("TheCreditOfALabelOfOursIsNotVoided", func(t *testing.T) {
		t.Parallel()
		b, s1 := setupOneLabel(t)
		// Someone voided the label we hold: netted as a credit, the label is
		// billed nothing, which is a discrepancy.
		rep := b.run(t, invoiceCT(s1.line(1, at("02:00:01"))+",charge",
			fmt.Sprintf("INV-20261202,2,2026-12-02T05:00:00Z,%s,%s,%s,%s,-%d,USD,void_credit",
				s1.carrierLabel(), s1.tracking(), s1.carrierKey(), s1.requestID(), s1.cost())))
		require.Zero(t, rep.Counts[reconcile.Voided])
		require.Equal(t, 2, rep.Counts[reconcile.AmountMismatch], "%v", rep.Counts)
	})

	t.Run("ALabelWhoseOnlyLinesWereVoidedIsUnbilled", func(t *testing.T) {
		t.Parallel()
		b, s1 := setupOneLabel(t)
		rep := b.run(t, invoiceCT(dupLine(s1, day, 1, at("02:00:05"), "CL-9001")+",charge",
			creditLine(s1, day, 2, at("09:00:00"), "CL-9001")), func(o *reconcile.Opts) { o.Grace = 0 })
		require.Equal(t, counts(reconcile.Voided, 2, reconcile.LabelNotBilled, 1), rep.Counts)
	})
}

// The charge_type column: optional, "charge" is a charge, a void credit must
// be negative.
func TestChargeTypeColumn(t *testing.T) {
	t.Parallel()
	b, s1 := setupOneLabel(t)
	rep := b.run(t, invoiceCT(s1.line(1, at("02:00:01"))+",charge"))
	require.Equal(t, counts(reconcile.Matched, 1), rep.Counts)
	var ct string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT charge_type FROM invoice_lines`).Scan(&ct))
	require.Equal(t, "", ct, "a charge is stored as one without the column")
	rep = b.run(t, invoice(s1.line(1, at("02:00:01"))))
	require.Equal(t, 0, rep.LinesNew)

	_, err := b.try(invoiceCT(s1.line(1, at("02:00:01")) + ",void_credit"))
	var pe *reconcile.ParseError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, err.Error(), "a void_credit line must be negative")
	_, err = b.try(invoiceCT(strings.Replace(s1.line(2, at("02:00:01")), ",612,", ",-612,", 1) + ",void_credit"))
	require.NoError(t, err)
	_, err = b.try(invoiceCT(strings.Replace(s1.line(2, at("02:00:01")), ",612,", ",-612,", 1) + ",refund"))
	require.ErrorContains(t, err, "charge_type")
	require.ErrorContains(t, err, "was imported before with other content")
}
