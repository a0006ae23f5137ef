package reconcile

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the void report a person reads: the run, the count of
// each outcome, the money recovered, and every item with its outcome. Every
// value from the invoice is neutralised (see neutralise).
func (r *VoidReport) WriteText(w io.Writer) error {
	var b bytes.Buffer
	what := "void"
	if r.DryRun {
		what = "void --dry-run"
	}
	fmt.Fprintf(&b, "reconcile %s, run %d: %s\n", what, r.RunID, neutralise(r.Source))
	fmt.Fprintf(&b, "category %s: %s, %s to void\n", r.Category, plural(len(r.Items), "item"), plural(r.Targets(), "carrier label"))
	var counts []string
	for _, o := range voidOutcomeOrder {
		if r.Counts[o] > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", r.Counts[o], o))
		}
	}
	if len(counts) == 0 {
		counts = append(counts, "nothing to void")
	}
	fmt.Fprintf(&b, "outcomes %s\n", strings.Join(counts, ", "))
	if len(r.Recovered) > 0 {
		fmt.Fprintf(&b, "recovered %s\n", money(r.Recovered))
	}
	if len(r.Items) > 0 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		for i := range r.Items {
			it := &r.Items[i]
			what := fmt.Sprintf("%s line %d", neutralise(it.InvoiceNo), it.LineNo)
			if it.LabelID != "" {
				what += " -> " + neutralise(it.LabelID)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", what, neutralise(it.CarrierLabelID),
				cents(it.AmountCents, it.Currency), it.Outcome, neutralise(it.Detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch code := r.ExitCode(); {
	case r.DryRun:
		b.WriteString("\ndry run: nothing changed: exit status 0\n")
	case code == 0 && r.Targets() == 0:
		b.WriteString("\nnothing was to be voided: exit status 0\n")
	case code == 0:
		b.WriteString("\nevery targeted label is voided: exit status 0\n")
	default:
		b.WriteString("\nsome labels are not voided: exit status 1\n")
	}
	return writeTrimmed(w, b.String())
}

// plural is "1 item", "2 items".
func plural(n int, noun string) string {
	return countOf(n, noun, noun+"s")
}

// countOf is n with the noun's singular or plural, n in thousands:
// "1 discrepancy", "1,200 discrepancies".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return thousands(int64(n)) + " " + many
}

// voidJSONItem is a VoidItem with absent values as null.
type voidJSONItem struct {
	InvoiceNo string    `json:"invoice_no"`
	LineNo    int       `json:"line_no"`
	BilledAt  time.Time `json:"billed_at"`
	jsonRefs
	AmountCents int64      `json:"amount_cents"`
	Currency    string     `json:"currency"`
	Outcome     string     `json:"outcome"`
	VoidedAt    *time.Time `json:"voided_at"`
	Detail      *string    `json:"detail"`
}

// WriteJSON writes the report exactly, values as they are (JSON is data).
func (r *VoidReport) WriteJSON(w io.Writer) error {
	items := make([]voidJSONItem, len(r.Items))
	for i, it := range r.Items {
		items[i] = voidJSONItem{
			InvoiceNo: it.InvoiceNo, LineNo: it.LineNo, BilledAt: it.BilledAt, jsonRefs: it.nullable(),
			AmountCents: it.AmountCents, Currency: it.Currency, Outcome: it.Outcome, VoidedAt: it.VoidedAt,
			Detail: opt(it.Detail),
		}
	}
	counts := make([]string, 0, len(voidOutcomeOrder))
	for _, o := range voidOutcomeOrder {
		counts = append(counts, fmt.Sprintf("%q: %d", o, r.Counts[o]))
	}
	recovered, err := json.Marshal(r.Recovered)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "{\n  \"run_id\": %d,\n", r.RunID)
	for _, f := range []struct {
		name string
		v    any
	}{
		{"source", r.Source}, {"category", r.Category}, {"dry_run", r.DryRun},
		{"targets", r.Targets()}, {"exit_status", r.ExitCode()},
	} {
		v, err := json.Marshal(f.v)
		if err != nil {
			return err
		}
		fmt.Fprintf(bw, "  %q: %s,\n", f.name, v)
	}
	fmt.Fprintf(bw, "  \"counts\": {%s},\n", strings.Join(counts, ", "))
	fmt.Fprintf(bw, "  \"recovered\": %s,\n", recovered)
	bw.WriteString("  \"items\": [")
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return err
		}
		if i > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n    ")
		bw.Write(b)
	}
	if len(items) > 0 {
		bw.WriteString("\n  ")
	}
	bw.WriteString("]\n}\n")
	return bw.Flush()
}

// VoidCSVHeader is the header line of [VoidReport.WriteCSV].
var VoidCSVHeader = []string{
	"run_id", "category", "invoice_no", "line_no", "billed_at", "label_id", "caller_id", "idempotency_key",
	"carrier_key", "reference", "carrier_label_id", "tracking_no", "amount_cents", "currency", "outcome",
	"voided_at", "detail",
}

// WriteCSV writes one row per item under [VoidCSVHeader], every cell
// neutralised against formulas.
func (r *VoidReport) WriteCSV(w io.Writer) error {
	bw := bufio.NewWriter(w)
	cw := csv.NewWriter(bw)
	if err := cw.Write(VoidCSVHeader); err != nil {
		return err
	}
	run := strconv.FormatInt(r.RunID, 10)
	for _, it := range r.Items {
		voided := ""
		if it.VoidedAt != nil {
			voided = it.VoidedAt.UTC().Format(time.RFC3339)
		}
		rec := it.appendCells([]string{run, r.Category, it.InvoiceNo, strconv.Itoa(it.LineNo), it.BilledAt.Format(time.RFC3339)})
		rec = append(rec, strconv.FormatInt(it.AmountCents, 10), it.Currency, it.Outcome, voided, it.Detail)
		for i, v := range rec {
			rec[i] = neutralise(v)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	return bw.Flush()
}
