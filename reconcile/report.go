package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Report is one saved run: what it covered, its counts, and its items, which
// stay in the database and are read on demand ([Report.Items]).
type Report struct {
	RunID int64
	// Source is the file name, or "carrier:YYYY-MM-DD".
	Source string
	// Period lists the billing days (YYYY-MM-DD, UTC) of the run.
	Period     []string
	StartedAt  time.Time
	FinishedAt time.Time
	Grace      time.Duration
	StuckAfter time.Duration
	// LinesRead is the number of lines in the invoice; LinesNew of them were
	// stored by this run, the others were imported before with the same content.
	LinesRead int
	LinesNew  int
	// Labels is the number of labels created in the period; LabelsInGrace of
	// them are unbilled but younger than Grace, and are not reported.
	Labels        int
	LabelsInGrace int
	// Counts has every category, zeros included: the number of items in each.
	Counts map[string]int
	// Amounts is, per category and currency, the sum of the items' amounts in
	// cents (see reconcile_items.amount_cents).
	Amounts map[string]map[string]int64
	// First holds the first items of each category, in report order.
	First map[string][]Item

	db         *pgxpool.Pool
	firstItems int
}

// Item is one line, label, key or intent of a run, with the ids to act on.
type Item struct {
	// ItemNo is the item's position in the report (from 1).
	ItemNo   int    `json:"item_no"`
	Category string `json:"category"`
	// Subject is one of the Subject… constants.
	Subject   string     `json:"subject"`
	InvoiceNo string     `json:"invoice_no"`
	LineNo    int        `json:"line_no"`
	BilledAt  *time.Time `json:"billed_at"`
	Refs
	// BilledCents is the invoice line's amount; CostCents the label's.
	BilledCents *int64 `json:"billed_cents"`
	CostCents   *int64 `json:"cost_cents"`
	// AmountCents is what the item is about, in Currency: the billed amount
	// of a matched label, the difference of an amount_mismatch, the charge of
	// a duplicate or of a line with no label, the cost of an unbilled label.
	AmountCents *int64 `json:"amount_cents"`
	Currency    string `json:"currency"`
	// MatchedBy says how the line found its label: idempotency_key,
	// carrier_label_id, tracking_no or reference.
	MatchedBy string `json:"matched_by"`
	Detail    string `json:"detail"`
}

// Refs are the ids an item is found and acted on by, ours and the carrier's.
type Refs struct {
	LabelID  string `json:"label_id"`
	CallerID string `json:"caller_id"`
	// IdempotencyKey is the caller's key; CarrierKey the key sent to the carrier.
	IdempotencyKey string `json:"idempotency_key"`
	CarrierKey     string `json:"carrier_key"`
	// Reference is our label request id.
	Reference      string `json:"reference"`
	CarrierLabelID string `json:"carrier_label_id"`
	TrackingNo     string `json:"tracking_no"`
}

// appendDest appends where rows.Scan puts the ids, in the order of the
// columns the queries select them in.
func (r *Refs) appendDest(dest []any) []any {
	return append(dest, &r.LabelID, &r.CallerID, &r.IdempotencyKey, &r.CarrierKey, &r.Reference, &r.CarrierLabelID, &r.TrackingNo)
}

// appendCells appends the ids as CSV cells, in the same order.
func (r *Refs) appendCells(rec []string) []string {
	return append(rec, r.LabelID, r.CallerID, r.IdempotencyKey, r.CarrierKey, r.Reference, r.CarrierLabelID, r.TrackingNo)
}

// jsonRefs are Refs with absent ids as null.
type jsonRefs struct {
	LabelID        *string `json:"label_id"`
	CallerID       *string `json:"caller_id"`
	IdempotencyKey *string `json:"idempotency_key"`
	CarrierKey     *string `json:"carrier_key"`
	Reference      *string `json:"reference"`
	CarrierLabelID *string `json:"carrier_label_id"`
	TrackingNo     *string `json:"tracking_no"`
}

func (r *Refs) nullable() jsonRefs {
	return jsonRefs{
		LabelID: opt(r.LabelID), CallerID: opt(r.CallerID), IdempotencyKey: opt(r.IdempotencyKey),
		CarrierKey: opt(r.CarrierKey), Reference: opt(r.Reference), CarrierLabelID: opt(r.CarrierLabelID),
		TrackingNo: opt(r.TrackingNo),
	}
}

// Discrepancies is the number of items neither matched nor voided.
func (r *Report) Discrepancies() int {
	n := 0
	for c, k := range r.Counts {
		if IsDiscrepancy(c) {
			n += k
		}
	}
	return n
}

// shown are the categories a report lists: every one, voided only when the
// run has voided items.
func (r *Report) shown() []string {
	if r.Counts[Voided] > 0 {
		return Categories
	}
	return Categories[:len(Categories)-1]
}

// ExitCode is the exit status operations.md gives a run that finished: 0 when
// every item is matched (or voided), 1 when any discrepancy is found.
func (r *Report) ExitCode() int {
	if r.Discrepancies() > 0 {
		return 1
	}
	return 0
}

// ErrNoRun is returned by [Load] for a run id never saved.
var ErrNoRun = errors.New("reconcile: no such run")

// Load reads a saved run.
func Load(ctx context.Context, pool *pgxpool.Pool, runID int64) (*Report, error) {
	r := &Report{RunID: runID, db: pool, firstItems: DefaultFirstItems}
	var (
		period          []time.Time
		grace, stuck    int64 // microseconds
		counts, amounts []byte
	)
	err := pool.QueryRow(ctx, `
		SELECT source, period, started_at, finished_at,
		       (extract(epoch FROM grace) * 1e6)::bigint, (extract(epoch FROM stuck_after) * 1e6)::bigint,
		       lines_read, lines_new, labels, labels_in_grace, counts, amounts
		  FROM reconcile_runs WHERE run_id = $1`, runID).Scan(
		&r.Source, &period, &r.StartedAt, &r.FinishedAt, &grace, &stuck,
		&r.LinesRead, &r.LinesNew, &r.Labels, &r.LabelsInGrace, &counts, &amounts)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoRun
	}
	if err != nil {
		return nil, err
	}
	r.StartedAt, r.FinishedAt = r.StartedAt.UTC(), r.FinishedAt.UTC()
	r.Grace, r.StuckAfter = time.Duration(grace)*time.Microsecond, time.Duration(stuck)*time.Microsecond
	for _, d := range period {
		r.Period = append(r.Period, d.Format(time.DateOnly))
	}
	if err := json.Unmarshal(counts, &r.Counts); err != nil {
		return nil, fmt.Errorf("run %d counts: %w", runID, err)
	}
	if err := json.Unmarshal(amounts, &r.Amounts); err != nil {
		return nil, fmt.Errorf("run %d amounts: %w", runID, err)
	}
	for _, c := range Categories {
		if _, ok := r.Counts[c]; !ok {
			r.Counts[c] = 0
		}
	}
	if err := r.loadFirst(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// reportOrder is the order of a report: by category as in [Categories], then
// line number, invoice, label, caller and key. No two items of a run tie.
const reportOrder = `i.category, i.line_no NULLS LAST, i.invoice_no COLLATE "C",
	i.label_id COLLATE "C" NULLS LAST, i.caller_id COLLATE "C", i.idem_key COLLATE "C"`

// itemColumns are an item's columns, from reconcile_items i, its line il and
// its label l: what reconcile_item_details shows.
const itemColumns = `i.category::text, i.subject::text, coalesce(i.invoice_no, ''), coalesce(i.line_no, 0), il.billed_at,
       coalesce(i.label_id, ''), coalesce(i.caller_id, l.caller_id, ''), coalesce(i.idem_key, l.created_by_key, ''),
       coalesce(i.carrier_key, l.carrier_key, NULLIF(il.idempotency_key, ''), ''),
       coalesce(i.reference, l.request_id, NULLIF(il.reference, ''), ''),
       coalesce(NULLIF(il.carrier_label_id, ''), l.carrier_label_id, ''),
       coalesce(NULLIF(il.tracking_no, ''), l.tracking_no, ''),
       il.cost_cents, l.cost_cents, i.amount_cents, coalesce(i.currency, ''), coalesce(i.matched_by::text, ''),
       coalesce(i.detail, '')`

const itemJoins = `
  LEFT JOIN invoice_lines il ON il.invoice_no = i.invoice_no AND il.line_no = i.line_no
  LEFT JOIN labels l ON l.label_id = i.label_id`

func scanItem(rows pgx.Rows, it *Item) error {
	// The row number, then the 18 itemColumns.
	dest := append(make([]any, 0, 19), &it.ItemNo, &it.Category, &it.Subject, &it.InvoiceNo, &it.LineNo, &it.BilledAt)
	dest = append(it.appendDest(dest), &it.BilledCents, &it.CostCents, &it.AmountCents, &it.Currency, &it.MatchedBy, &it.Detail)
	err := rows.Scan(dest...)
	if err == nil && it.BilledAt != nil {
		t := it.BilledAt.UTC()
		it.BilledAt = &t
	}
	return err
}

// loadFirst reads the first items of each category, in report order. The
// discrepancies are few and sorted whole; the matched ones, a million on a
// big night, only go through a bounded top-N. ItemNo is the position in the
// whole report: categories come one after the other, so it follows from the
// counts.
func (r *Report) loadFirst(ctx context.Context) error {
	r.First = map[string][]Item{}
	selection := `
SELECT * FROM (
    SELECT i.*, row_number() OVER (PARTITION BY i.category ORDER BY ` + reportOrder + `) AS k
      FROM reconcile_items i WHERE i.run_id = $1 AND i.category <> 'matched') d
 WHERE k <= $2
UNION ALL
SELECT i.*, row_number() OVER (ORDER BY ` + reportOrder + `)
  FROM (SELECT i.* FROM reconcile_items i WHERE i.run_id = $1 AND i.category = 'matched'
         ORDER BY ` + reportOrder + ` LIMIT $2) i`
	start := map[string]int{}
	n := 1
	for _, c := range Categories {
		start[c] = n
		n += r.Counts[c]
	}
	rows, err := r.db.Query(ctx, `SELECT i.k, `+itemColumns+` FROM (`+selection+`) i`+itemJoins+` ORDER BY i.category, i.k`,
		r.RunID, r.firstItems)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var it Item
		if err := scanItem(rows, &it); err != nil {
			return err
		}
		it.ItemNo += start[it.Category] - 1
		r.First[it.Category] = append(r.First[it.Category], it)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for c, items := range r.First {
		sort.Slice(items, func(i, j int) bool { return items[i].ItemNo < items[j].ItemNo })
		r.First[c] = items
	}
	return nil
}

// Items calls fn with every item of the run, in report order, reading them
// from the database as it goes. fn must not keep it: the Item is reused.
func (r *Report) Items(ctx context.Context, fn func(it *Item) error) error {
	rows, err := r.db.Query(ctx, `SELECT row_number() OVER w, `+itemColumns+` FROM reconcile_items i`+itemJoins+`
		WHERE i.run_id = $1 WINDOW w AS (ORDER BY `+reportOrder+`) ORDER BY `+reportOrder, r.RunID)
	if err != nil {
		return err
	}
	defer rows.Close()
	var it Item
	for rows.Next() {
		it = Item{}
		if err := scanItem(rows, &it); err != nil {
			return err
		}
		if err := fn(&it); err != nil {
			return err
		}
	}
	return rows.Err()
}
