package reconcile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the summary a person reads: what the run covered, the
// count and amount of each category, and the first items of each.
func (r *Report) WriteText(_ context.Context, w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "reconcile run %d: %s\n", r.RunID, neutralise(r.Source))
	period := strings.Join(r.Period, ", ")
	if period == "" {
		period = "none (the invoice has no lines)"
	}
	fmt.Fprintf(&b, "period   %s (UTC billing days; the labels created on them are compared)\n", period)
	fmt.Fprintf(&b, "started  %s, took %s\n", r.StartedAt.Format(time.RFC3339), r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond))
	fmt.Fprintf(&b, "lines    %s read, %s new\n", thousands(int64(r.LinesRead)), thousands(int64(r.LinesNew)))
	fmt.Fprintf(&b, "labels   %s created in the period; %s unbilled but younger than the grace period (%s), not reported\n\n",
		thousands(int64(r.Labels)), thousands(int64(r.LabelsInGrace)), r.Grace)

	nameW, countW := len("category"), len("items")
	for _, c := range r.shown() {
		nameW = max(nameW, len(c))
		countW = max(countW, len(thousands(int64(r.Counts[c]))))
	}
	fmt.Fprintf(&b, "%-*s  %*s  %s\n", nameW, "category", countW, "items", "amount")
	for _, c := range r.shown() {
		fmt.Fprintf(&b, "%-*s  %*s  %s\n", nameW, c, countW, thousands(int64(r.Counts[c])), money(r.Amounts[c]))
	}
	b.WriteString("(amount: billed, for matched; at stake, for the others)\n")
	if r.Counts[Voided] > 0 {
		b.WriteString("(voided: the charges the carrier credited back for a void)\n")
	}
	if n := r.Discrepancies(); n > 0 {
		fmt.Fprintf(&b, "\n%s: exit status 1\n", countOf(n, "discrepancy", "discrepancies"))
	} else if r.Counts[Voided] > 0 {
		b.WriteString("\nevery item matched or voided: exit status 0\n")
	} else {
		b.WriteString("\nevery item matched: exit status 0\n")
	}

	// Discrepancies first; the matched ones last, as a sample.
	order := append(append([]string{}, Categories[1:]...), Matched)
	for _, c := range order {
		items := r.First[c]
		if len(items) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s: first %d of %s\n", c, len(items), thousands(int64(r.Counts[c])))
		tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		for i := range items {
			it := &items[i]
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", itemWhat(it), itemWho(it), amountOf(it), neutralise(it.Detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return writeTrimmed(w, b.String())
}

// writeTrimmed writes text with no line ending in blanks (tabwriter pads
// empty last cells).
func writeTrimmed(w io.Writer, text string) error {
	bw := bufio.NewWriter(w)
	for _, line := range strings.SplitAfter(text, "\n") {
		if line == "" {
			continue
		}
		bw.WriteString(strings.TrimRight(line, " \n"))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// itemWhat names the line, label, key or intent an item is about. Every
// value in it is neutralised.
func itemWhat(it *Item) string {
	switch it.Subject {
	case SubjectKey:
		return "key record naming " + neutralise(it.LabelID)
	case SubjectIntent:
		return "intent " + neutralise(it.Reference)
	case SubjectLabel:
		return "label " + neutralise(it.LabelID)
	}
	s := fmt.Sprintf("%s line %d", neutralise(it.InvoiceNo), it.LineNo)
	if it.LabelID != "" {
		s += " -> " + neutralise(it.LabelID)
	}
	if it.MatchedBy != "" {
		s += " (by " + neutralise(it.MatchedBy) + ")"
	}
	return s
}

// itemWho names the caller, key and request an item leads to. Every value in
// it is neutralised.
func itemWho(it *Item) string {
	var parts []string
	if it.CallerID != "" {
		parts = append(parts, "caller "+neutralise(it.CallerID))
	}
	if it.IdempotencyKey != "" {
		parts = append(parts, "key "+neutralise(it.IdempotencyKey))
	}
	if it.Reference != "" && it.Subject != SubjectIntent {
		parts = append(parts, "ref "+neutralise(it.Reference))
	}
	if len(parts) == 0 && it.CarrierLabelID != "" {
		parts = append(parts, "carrier label "+neutralise(it.CarrierLabelID))
		if it.TrackingNo != "" {
			parts = append(parts, "tracking "+neutralise(it.TrackingNo))
		}
	}
	return strings.Join(parts, " ")
}

// neutralise is OWASP's rule against CSV injection, applied to every cell of
// the CSV report and every value the text report prints: a value that begins
// with =, +, -, @, a tab or a carriage return, which a spreadsheet would read
// as a formula, gets a single quote in front, which makes it text. A number
// (-612, -1.5) keeps its minus sign as it is. The JSON report is data, not a
// spreadsheet, and carries every value exactly.
func neutralise(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '-':
		if isDecimal(s[1:]) {
			return s
		}
	case '=', '+', '@', '\t', '\r':
	default:
		return s
	}
	return "'" + s
}

// isDecimal reports whether s is digits, with a fraction or none: 12, 1.5.
func isDecimal(s string) bool {
	digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
	whole, frac, dot := strings.Cut(s, ".")
	return digits(whole) && (!dot || digits(frac))
}

func amountOf(it *Item) string {
	if it.AmountCents == nil {
		return ""
	}
	return cents(*it.AmountCents, it.Currency)
}

// money renders an amount per currency, e.g. "USD 1,234.50".
func money(m map[string]int64) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, cents(m[c], c))
	}
	return strings.Join(parts, ", ")
}

func cents(v int64, currency string) string {
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	s := fmt.Sprintf("%s%s.%02d", sign, thousands(v/100), v%100)
	if currency == "" {
		return s
	}
	return neutralise(currency) + " " + s
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// jsonItem is an Item with absent values as null.
type jsonItem struct {
	ItemNo    int        `json:"item_no"`
	Category  string     `json:"category"`
	Subject   string     `json:"subject"`
	InvoiceNo *string    `json:"invoice_no"`
	LineNo    *int       `json:"line_no"`
	BilledAt  *time.Time `json:"billed_at"`
	jsonRefs
	BilledCents *int64  `json:"billed_cents"`
	CostCents   *int64  `json:"cost_cents"`
	AmountCents *int64  `json:"amount_cents"`
	Currency    *string `json:"currency"`
	MatchedBy   *string `json:"matched_by"`
	Detail      *string `json:"detail"`
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toJSONItem(it *Item) jsonItem {
	j := jsonItem{
		ItemNo: it.ItemNo, Category: it.Category, Subject: it.Subject,
		InvoiceNo: opt(it.InvoiceNo), BilledAt: it.BilledAt, jsonRefs: it.nullable(),
		BilledCents: it.BilledCents, CostCents: it.CostCents, AmountCents: it.AmountCents,
		Currency: opt(it.Currency), MatchedBy: opt(it.MatchedBy), Detail: opt(it.Detail),
	}
	if it.InvoiceNo != "" {
		n := it.LineNo
		j.LineNo = &n
	}
	return j
}

// WriteJSON writes the run and every item, one item per line, streaming the
// items from the database. Values are written exactly as they are, hostile
// or not: JSON is data, not a spreadsheet (see neutralise).
func (r *Report) WriteJSON(ctx context.Context, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	field := func(name string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		fmt.Fprintf(bw, "  %q: %s,\n", name, b)
		return nil
	}
	period := r.Period
	if period == nil {
		period = []string{}
	}
	bw.WriteString("{\n")
	for _, f := range []struct {
		name string
		v    any
	}{
		{"run_id", r.RunID}, {"source", r.Source}, {"period", period},
		{"started_at", r.StartedAt}, {"finished_at", r.FinishedAt},
		{"grace", r.Grace.String()}, {"stuck_after", r.StuckAfter.String()},
		{"lines_read", r.LinesRead}, {"lines_new", r.LinesNew},
		{"labels", r.Labels}, {"labels_in_grace", r.LabelsInGrace},
		{"discrepancies", r.Discrepancies()}, {"exit_status", r.ExitCode()},
	} {
		if err := field(f.name, f.v); err != nil {
			return err
		}
	}
	// Counts and amounts in the order of the category table, not sorted by name.
	var counts, amounts []string
	for _, c := range r.shown() {
		counts = append(counts, fmt.Sprintf("%q: %d", c, r.Counts[c]))
		if len(r.Amounts[c]) > 0 {
			b, err := json.Marshal(r.Amounts[c])
			if err != nil {
				return err
			}
			amounts = append(amounts, fmt.Sprintf("%q: %s", c, b))
		}
	}
	fmt.Fprintf(bw, "  \"counts\": {%s},\n", strings.Join(counts, ", "))
	fmt.Fprintf(bw, "  \"amounts\": {%s},\n", strings.Join(amounts, ", "))
	bw.WriteString("  \"items\": [")
	first := true
	err := r.Items(ctx, func(it *Item) error {
		b, err := json.Marshal(toJSONItem(it))
		if err != nil {
			return err
		}
		if first {
			bw.WriteString("\n    ")
			first = false
		} else {
			bw.WriteString(",\n    ")
		}
		_, err = bw.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	if !first {
		bw.WriteString("\n  ")
	}
	bw.WriteString("]\n}\n")
	return bw.Flush()
}

// CSVHeader is the header line of [Report.WriteCSV].
var CSVHeader = []string{
	"run_id", "item_no", "category", "subject", "invoice_no", "line_no", "billed_at", "label_id",
	"caller_id", "idempotency_key", "carrier_key", "reference", "carrier_label_id", "tracking_no",
	"billed_cents", "cost_cents", "amount_cents", "currency", "matched_by", "detail",
}

// WriteCSV writes every item, one per row, under [CSVHeader]. Every cell is
// neutralised against formulas (see neutralise); the values are otherwise
// those of [Report.WriteJSON].
func (r *Report) WriteCSV(ctx context.Context, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	cw := csv.NewWriter(bw)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	run := strconv.FormatInt(r.RunID, 10)
	rec := make([]string, len(CSVHeader))
	num := func(p *int64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatInt(*p, 10)
	}
	err := r.Items(ctx, func(it *Item) error {
		line, billed := "", ""
		if it.InvoiceNo != "" {
			line = strconv.Itoa(it.LineNo)
		}
		if it.BilledAt != nil {
			billed = it.BilledAt.Format(time.RFC3339)
		}
		rec = append(rec[:0], run, strconv.Itoa(it.ItemNo), it.Category, it.Subject, it.InvoiceNo, line, billed)
		rec = append(it.appendCells(rec), num(it.BilledCents), num(it.CostCents), num(it.AmountCents), it.Currency,
			it.MatchedBy, it.Detail)
		for i, v := range rec {
			rec[i] = neutralise(v)
		}
		return cw.Write(rec)
	})
	if err != nil {
		return err
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	return bw.Flush()
}
