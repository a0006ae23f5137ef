package sim_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
)

// invoice fetches day's invoice over HTTP and returns its lines as maps.
func invoice(t *testing.T, b *testBundle, d time.Time) []map[string]string {
	t.Helper()
	raw, err := b.client.Invoice(context.Background(), d)
	require.NoError(t, err)
	return parseInvoice(t, raw)
}

// parseInvoice reads an invoice of the simulator's columns.
func parseInvoice(t *testing.T, raw []byte) []map[string]string {
	t.Helper()
	header, lines := linesOf(t, raw)
	require.Equal(t, sim.InvoiceHeader, strings.Join(header, ","))
	return lines
}

// linesOf reads an invoice of any columns into maps by column name, and
// returns its header.
func linesOf(t *testing.T, raw []byte) (header []string, lines []map[string]string) {
	t.Helper()
	records, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, records)
	for _, rec := range records[1:] {
		line := map[string]string{}
		for i, name := range records[0] {
			line[name] = rec[i]
		}
		lines = append(lines, line)
	}
	return records[0], lines
}

func cents(t *testing.T, line map[string]string) int64 {
	t.Helper()
	c, err := strconv.ParseInt(line["cost_cents"], 10, 64)
	require.NoError(t, err)
	return c
}

// buyDay buys n labels on day, one a minute from 10:00, and returns them.
func buyDay(t *testing.T, b *testBundle, d time.Time, n int, prefix string) []*carrier.Label {
	t.Helper()
	var labels []*carrier.Label
	for i := range n {
		b.clock.Set(d.Add(10*time.Hour + time.Duration(i)*time.Minute))
		l := b.mustBuy(t, fmt.Sprintf("%s-%d", prefix, i), purchase(int64(1000+i), "51147"))
		labels = append(labels, l)
	}
	return labels
}

func TestInvoice(t *testing.T) {
	t.Parallel()

	t.Run("BillsTheDaysPurchasesInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.clock.Set(day.Add(-time.Second)) // the day before, 23:59:59
		b.mustBuy(t, "before", purchase(1, "51147"))
		buyDay(t, b, day, 2, "k")
		b.clock.Set(day.Add(24 * time.Hour)) // the next day, 00:00:00
		b.mustBuy(t, "after", purchase(2, "51147"))

		resp, err := http.Get(b.url + "/v1/invoices?date=2026-12-02")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/csv; charset=utf-8", resp.Header.Get("Content-Type"))

		raw, err := b.client.Invoice(context.Background(), day)
		require.NoError(t, err)
		require.Equal(t, sim.InvoiceHeader+"\n"+
			"INV-20261202,1,2026-12-02T10:00:00Z,CL-2,GRD000001000,k-0,lr_1000,595,USD\n"+
			"INV-20261202,2,2026-12-02T10:01:00Z,CL-3,GRD000001001,k-1,lr_1001,595,USD\n", string(raw))

		prev := invoice(t, b, day.Add(-time.Hour))
		require.Len(t, prev, 1)
		require.Equal(t, "INV-20261201", prev[0]["invoice_no"])
		require.Equal(t, "CL-1", prev[0]["carrier_label_id"])
		next := invoice(t, b, day.Add(24*time.Hour))
		require.Len(t, next, 1)
		require.Equal(t, "CL-4", next[0]["carrier_label_id"])
	})

	t.Run("EmptyDayIsTheHeaderOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		raw, err := b.client.Invoice(context.Background(), day)
		require.NoError(t, err)
		require.Equal(t, sim.InvoiceHeader+"\n", string(raw))
	})

	t.Run("BadDate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for _, q := range []string{"", "?date=", "?date=2026-13-01", "?date=02.12.2026"} {
			status, body := b.do(t, "GET", "/v1/invoices"+q, "")
			require.Equal(t, http.StatusBadRequest, status, q)
			require.Contains(t, body, `"invalid_date"`)
		}
	})
}

func TestInvoiceBillingErrors(t *testing.T) {
	t.Parallel()

	setupBilled := func(t *testing.T, opts sim.Options) ([]*carrier.Label, []map[string]string) {
		b := setup(t, &opts)
		labels := buyDay(t, b, day, 3, "k")
		return labels, invoice(t, b, day)
	}
	requireLine := func(t *testing.T, line map[string]string, lineNo int, l *carrier.Label, key string, cost int64) {
		t.Helper()
		require.Equal(t, strconv.Itoa(lineNo), line["line_no"])
		require.Equal(t, l.CarrierLabelID, line["carrier_label_id"])
		require.Equal(t, l.TrackingNo, line["tracking_no"])
		require.Equal(t, key, line["idempotency_key"])
		require.Equal(t, l.PurchasedAt.Format(time.RFC3339), line["billed_at"])
		require.Equal(t, cost, cents(t, line))
	}

	t.Run("Duplicate", func(t *testing.T) {
		t.Parallel()
		labels, lines := setupBilled(t, sim.Options{DuplicateLineRate: 1})
		require.Len(t, lines, 6)
		for i, l := range labels {
			requireLine(t, lines[2*i], 2*i+1, l, fmt.Sprintf("k-%d", i), l.CostCents)
			requireLine(t, lines[2*i+1], 2*i+2, l, fmt.Sprintf("k-%d", i), l.CostCents)
		}
	})

	t.Run("AmountChange", func(t *testing.T) {
		t.Parallel()
		labels, lines := setupBilled(t, sim.Options{AmountChangeRate: 1})
		require.Len(t, lines, 3)
		for i, l := range labels {
			requireLine(t, lines[i], i+1, l, fmt.Sprintf("k-%d", i), l.CostCents+sim.AmountChangeCents)
		}
	})

	t.Run("Credit", func(t *testing.T) {
		t.Parallel()
		labels, lines := setupBilled(t, sim.Options{CreditRate: 1})
		require.Len(t, lines, 9)
		for i, l := range labels {
			key := fmt.Sprintf("k-%d", i)
			requireLine(t, lines[3*i], 3*i+1, l, key, l.CostCents)
			requireLine(t, lines[3*i+1], 3*i+2, l, key, l.CostCents)
			requireLine(t, lines[3*i+2], 3*i+3, l, key, -l.CostCents)
		}
	})

	t.Run("Foreign", func(t *testing.T) {
		t.Parallel()
		labels, lines := setupBilled(t, sim.Options{ForeignLineRate: 1})
		require.Len(t, lines, 6)
		ours := map[string]bool{}
		for _, l := range labels {
			ours[l.CarrierLabelID] = true
			ours[l.TrackingNo] = true
		}
		for i, l := range labels {
			requireLine(t, lines[2*i], 2*i+1, l, fmt.Sprintf("k-%d", i), l.CostCents)
			foreign := lines[2*i+1]
			require.False(t, ours[foreign["carrier_label_id"]])
			require.False(t, ours[foreign["tracking_no"]])
			require.True(t, strings.HasPrefix(foreign["carrier_label_id"], "CL-"))
			require.Empty(t, foreign["idempotency_key"])
			require.Empty(t, foreign["reference"])
			require.Positive(t, cents(t, foreign))
			require.Equal(t, lines[2*i]["billed_at"], foreign["billed_at"])
		}
	})
}

func TestInvoiceIsDeterministic(t *testing.T) {
	t.Parallel()
	opts := sim.Options{Seed: 11, DuplicateLineRate: 0.2, AmountChangeRate: 0.2, ForeignLineRate: 0.2, CreditRate: 0.2}

	fetch := func(b *testBundle) string {
		raw, err := b.client.Invoice(context.Background(), day)
		require.NoError(t, err)
		return string(raw)
	}
	b1 := setup(t, &opts)
	buyDay(t, b1, day, 30, "k")
	first := fetch(b1)
	require.Equal(t, first, fetch(b1), "the same day twice is the same file")

	b2 := setup(t, &opts)
	buyDay(t, b2, day, 30, "k")
	require.Equal(t, first, fetch(b2), "the same purchases and seed make the same file")

	// Each kind of error shows up at these rates, so the test sees all of them.
	lines := parseInvoice(t, []byte(first))
	var negative, foreign, dup int
	seen := map[string]int{}
	for _, l := range lines {
		seen[l["carrier_label_id"]]++
		if cents(t, l) < 0 {
			negative++
		}
		if l["idempotency_key"] == "" {
			foreign++
		}
	}
	for _, n := range seen {
		if n > 1 {
			dup++
		}
	}
	require.Positive(t, negative)
	require.Positive(t, foreign)
	require.Positive(t, dup)
	require.Greater(t, len(lines), 30)

	// A later purchase of the day appends; the lines billed before keep their numbers.
	buyDay(t, b1, day.Add(5*time.Hour), 1, "late")
	later := fetch(b1)
	require.True(t, strings.HasPrefix(later, first), "earlier lines are unchanged")
	require.Greater(t, len(later), len(first))

	// Another seed bills the same purchases with other errors.
	other := opts
	other.Seed = 12
	b3 := setup(t, &other)
	buyDay(t, b3, day, 30, "k")
	require.NotEqual(t, first, fetch(b3))
}

func TestWriteSyntheticInvoice(t *testing.T) {
	t.Parallel()
	mix := sim.BillingMix{DuplicateLineRate: 0.05, AmountChangeRate: 0.05, ForeignLineRate: 0.05, CreditRate: 0.05}

	write := func(t *testing.T, n int, mix sim.BillingMix, seed int64) (string, sim.Truth) {
		t.Helper()
		var buf bytes.Buffer
		truth, err := sim.WriteSyntheticInvoice(&buf, day, n, mix, seed)
		require.NoError(t, err)
		return buf.String(), truth
	}

	t.Run("MatchesItsTruth", func(t *testing.T) {
		t.Parallel()
		raw, truth := write(t, 2000, mix, 1)
		lines := parseInvoice(t, []byte(raw))
		require.Len(t, lines, 2000)
		require.Equal(t, 2000, truth.Lines)
		require.Equal(t, "2026-12-02", truth.Day)
		require.Equal(t, "INV-20261202", truth.InvoiceNo)
		require.Equal(t, truth.Lines,
			truth.Matched+2*truth.Duplicates+truth.AmountChanges+3*truth.Credits+truth.Foreign)
		require.Len(t, truth.Labels, truth.Matched+truth.Duplicates+truth.AmountChanges+truth.Credits)
		for _, n := range []int{truth.Duplicates, truth.AmountChanges, truth.Credits, truth.Foreign} {
			require.Positive(t, n, "each error kind appears at 5%% of 2000 lines")
		}

		byID := map[string]sim.TruthLabel{}
		for _, l := range truth.Labels {
			_, dup := byID[l.CarrierLabelID]
			require.False(t, dup)
			byID[l.CarrierLabelID] = l
			require.Equal(t, carrier.DeriveKey(l.CallerID, l.CallerKey), l.IdempotencyKey)
			require.True(t, strings.HasPrefix(l.Reference, "lr_"))
			require.Len(t, l.Reference, 29)
			cost, ok := sim.Cost(l.Service, l.WeightG)
			require.True(t, ok)
			require.Equal(t, cost, l.CostCents)
			require.False(t, l.PurchasedAt.Before(day))
			require.True(t, l.PurchasedAt.Before(day.Add(24*time.Hour)))
		}

		// Re-derive every label's billing from the lines alone.
		billed := map[string][]int64{}
		foreign := 0
		for i, line := range lines {
			require.Equal(t, strconv.Itoa(i+1), line["line_no"])
			l, ours := byID[line["carrier_label_id"]]
			if !ours {
				foreign++
				require.Empty(t, line["idempotency_key"])
				require.Empty(t, line["reference"])
				continue
			}
			require.Equal(t, l.TrackingNo, line["tracking_no"])
			require.Equal(t, l.IdempotencyKey, line["idempotency_key"])
			require.Equal(t, l.Reference, line["reference"])
			require.Equal(t, l.PurchasedAt.Format(time.RFC3339), line["billed_at"])
			billed[l.CarrierLabelID] = append(billed[l.CarrierLabelID], cents(t, line))
		}
		require.Equal(t, truth.Foreign, foreign)
		for id, l := range byID {
			c := l.CostCents
			want := map[string][]int64{
				sim.BillingMatched:      {c},
				sim.BillingDuplicate:    {c, c},
				sim.BillingAmountChange: {c + sim.AmountChangeCents},
				sim.BillingCredit:       {c, c, -c},
			}[l.Billing]
			require.Equal(t, want, billed[id], "%s billed as %s", id, l.Billing)
		}
	})

	t.Run("Deterministic", func(t *testing.T) {
		t.Parallel()
		a, ta := write(t, 500, mix, 42)
		b, tb := write(t, 500, mix, 42)
		require.Equal(t, a, b)
		require.Equal(t, ta, tb)
		c, _ := write(t, 500, mix, 43)
		require.NotEqual(t, a, c)
	})

	t.Run("EachKindAlone", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			mix   sim.BillingMix
			check func(sim.Truth) int
			per   int
		}{
			{sim.BillingMix{}, func(tr sim.Truth) int { return tr.Matched }, 1},
			{sim.BillingMix{DuplicateLineRate: 1}, func(tr sim.Truth) int { return tr.Duplicates }, 2},
			{sim.BillingMix{AmountChangeRate: 1}, func(tr sim.Truth) int { return tr.AmountChanges }, 1},
			{sim.BillingMix{CreditRate: 1}, func(tr sim.Truth) int { return tr.Credits }, 3},
			{sim.BillingMix{ForeignLineRate: 1}, func(tr sim.Truth) int { return tr.Foreign }, 2},
		} {
			_, truth := write(t, 12, tt.mix, 1)
			require.Equal(t, 12/tt.per, tt.check(truth), "%+v", tt.mix)
			require.Equal(t, 12, truth.Lines)
		}
	})

	t.Run("AGroupThatDoesNotFitIsBilledNormally", func(t *testing.T) {
		t.Parallel()
		raw, truth := write(t, 4, sim.BillingMix{CreditRate: 1}, 1)
		require.Len(t, parseInvoice(t, []byte(raw)), 4)
		require.Equal(t, 1, truth.Credits)
		require.Equal(t, 1, truth.Matched)
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		raw, truth := write(t, 0, mix, 1)
		require.Equal(t, sim.InvoiceHeader+"\n", raw)
		require.Zero(t, truth.Lines)
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		_, err := sim.WriteSyntheticInvoice(&buf, day, 10, sim.BillingMix{DuplicateLineRate: 0.7, CreditRate: 0.7}, 1)
		require.Error(t, err)
		_, err = sim.WriteSyntheticInvoice(&buf, day, -1, sim.BillingMix{}, 1)
		require.Error(t, err)
	})
}
