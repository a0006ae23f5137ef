package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/labelkit/labels/carrier"
)

// Void outcomes: the four a void job records (operations.md), and what a
// void report says of the other items.
const (
	// VoidVoided: the carrier voided the label (now or before).
	VoidVoided = "voided"
	// VoidWindowClosed: the label is older than the carrier's void window.
	VoidWindowClosed = "window_closed"
	// VoidNotFound: the carrier knows no such label.
	VoidNotFound = "not_found"
	// VoidFailed: the carrier refused the void otherwise, the label turned out
	// to be one we hold, or no answer came within the job's attempts.
	VoidFailed = "failed"
	// VoidPending: asked for, not answered yet (a report's wait ended first).
	VoidPending = "pending"
	// VoidWouldVoid: a dry run's target that is not voided yet.
	VoidWouldVoid = "would_void"
	// VoidKept: an item of the category that is not voided; the detail says why.
	VoidKept = "kept"
)

// VoidOutcomes are the outcomes a void job records, in report order.
var VoidOutcomes = []string{VoidVoided, VoidWindowClosed, VoidNotFound, VoidFailed}

// voidOutcomeOrder is the order of a void report's counts.
var voidOutcomeOrder = []string{VoidVoided, VoidWindowClosed, VoidNotFound, VoidFailed, VoidPending, VoidWouldVoid, VoidKept}

// EnqueueVoids inserts, in tx, one void job per carrier label; the jobs are
// unique per label while one is queued or running (jobs.EnqueueVoids).
type EnqueueVoids func(ctx context.Context, tx pgx.Tx, carrierLabelIDs []string) error

// VoidOpts is what one `reconcile void` does.
type VoidOpts struct {
	// RunID is the saved run whose items are voided.
	RunID int64
	// Category is DuplicateCharge (the default when empty) or BilledWithoutLabel.
	Category string
	// DryRun plans and reports, and writes nothing.
	DryRun bool
	// Enqueue inserts the void jobs; required unless DryRun.
	Enqueue EnqueueVoids
	// Wait bounds how long [Void] waits for the outcomes; zero does not wait.
	Wait time.Duration
	// PollInterval is how often the outcomes are read while waiting; zero
	// means 250ms.
	PollInterval time.Duration
	// NowFunc is the clock of requested_at; nil means time.Now.
	NowFunc func() time.Time
}

// VoidItem is one item of the run in the category, with what became of it.
type VoidItem struct {
	InvoiceNo string    `json:"invoice_no"`
	LineNo    int       `json:"line_no"`
	BilledAt  time.Time `json:"billed_at"`
	Refs
	AmountCents int64      `json:"amount_cents"`
	Currency    string     `json:"currency"`
	Outcome     string     `json:"outcome"`
	VoidedAt    *time.Time `json:"voided_at"`
	Detail      string     `json:"detail"`
}

// VoidReport is the outcome of every item of one run's category.
type VoidReport struct {
	RunID    int64
	Source   string // the run's source
	Category string
	DryRun   bool
	Items    []VoidItem
	// Counts has every outcome of the items, zeros included.
	Counts map[string]int
	// Recovered is, per currency, the charges of the items voided (a label
	// with several items counts once).
	Recovered map[string]int64
}

// Targets is the number of carrier labels the report voids or would void.
func (r *VoidReport) Targets() int {
	seen := map[string]bool{}
	for _, it := range r.Items {
		if it.Outcome != VoidKept {
			seen[it.CarrierLabelID] = true
		}
	}
	return len(seen)
}

// ExitCode is the exit status of operations.md: 0 when every targeted label
// is voided (or was), 1 when some could not be (or had no answer yet). A dry
// run changes nothing and exits 0.
func (r *VoidReport) ExitCode() int {
	if r.DryRun {
		return 0
	}
	for _, it := range r.Items {
		if it.Outcome != VoidKept && it.Outcome != VoidVoided {
			return 1
		}
	}
	return 0
}

// ErrVoidCategory is a category [Void] does not void.
var ErrVoidCategory = errors.New("reconcile: void takes --category duplicate_charge or billed_without_label")

// Void voids, at the carrier, the extra purchases that a saved run found in
// one category, and reports every item of that category with its outcome:
//
//   - duplicate_charge: every carrier label but the label's own;
//   - billed_without_label: the labels bought under a carrier key of ours
//     (the intent the line's reference names has that carrier key) that no
//     label of ours holds.
//
// Never voided, and reported kept with the reason: a carrier label that a
// labels row or a completed key's saved response names, one that an intent
// still pending may receive on its next attempt (the intent named by the
// reference or the carrier key of the line, or of another line billing the
// same carrier label: see [GuardVoid]), a line without a carrier label, a
// credit. A label kept for a pending intent is decided again by the next
// Void, once the intent is final. The carrier labels to void are recorded
// (reconcile_voids, reconcile_void_items) and their void jobs enqueued in one
// transaction; a label asked for before is not asked again unless its void
// failed. Then Void waits up to opts.Wait for their outcomes.
func Void(ctx context.Context, pool *pgxpool.Pool, opts VoidOpts) (*VoidReport, error) {
	if opts.Category == "" {
		opts.Category = DuplicateCharge
	}
	if opts.Category != DuplicateCharge && opts.Category != BilledWithoutLabel {
		return nil, ErrVoidCategory
	}
	if !opts.DryRun && opts.Enqueue == nil {
		return nil, errors.New("reconcile: void: no Enqueue")
	}
	now := time.Now
	if opts.NowFunc != nil {
		now = opts.NowFunc
	}
	rep := &VoidReport{RunID: opts.RunID, Category: opts.Category, DryRun: opts.DryRun}
	var period []time.Time
	err := pool.QueryRow(ctx, `SELECT source, period FROM reconcile_runs WHERE run_id = $1`, opts.RunID).Scan(&rep.Source, &period)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoRun
	}
	if err != nil {
		return nil, err
	}
	var claims map[string][]claim
	if rep.Items, claims, err = planVoids(ctx, pool, opts.RunID, opts.Category, period); err != nil {
		return nil, err
	}
	var targets []string
	seen := map[string]bool{}
	for _, it := range rep.Items {
		if it.Outcome != VoidKept && !seen[it.CarrierLabelID] {
			seen[it.CarrierLabelID] = true
			targets = append(targets, it.CarrierLabelID)
		}
	}
	if !opts.DryRun && len(targets) > 0 {
		if err := requestVoids(ctx, pool, opts, rep.Items, claims, now().UTC()); err != nil {
			return nil, err
		}
	}
	outcomes, err := waitVoids(ctx, pool, targets, opts)
	if err != nil {
		return nil, err
	}
	rep.fill(outcomes)
	return rep, nil
}

// planSQL reads the run's items of one category with their invoice line and
// label, and says why an item is kept whatever the guard says: what the
// category itself rules out, before the guard (a credit, no carrier label)
// and after it (for billed_without_label, a carrier key not of the intent the
// reference names: the guard's reason, when there is one, says more).
const planSQL = `
SELECT i.invoice_no, i.line_no, il.billed_at, coalesce(i.label_id, ''),
       coalesce(i.caller_id, l.caller_id, ''), coalesce(i.idem_key, l.created_by_key, ''),
       il.idempotency_key, il.reference, il.carrier_label_id, il.tracking_no, il.cost_cents, il.currency,
       CASE WHEN il.cost_cents <= 0 THEN 'a credit, not a charge'
            WHEN il.carrier_label_id = '' THEN 'the line names no carrier label'
       END,
       CASE WHEN $2::text = 'billed_without_label' AND il.idempotency_key = '' THEN 'billed without a carrier key, so not bought under one of ours'
            WHEN $2::text = 'billed_without_label' AND (it.request_id IS NULL OR it.carrier_key <> il.idempotency_key)
                 THEN 'the carrier key is not the one of the intent its reference names: not bought under a key of ours'
       END
  FROM reconcile_items i
  JOIN invoice_lines il ON il.invoice_no = i.invoice_no AND il.line_no = i.line_no
  LEFT JOIN labels l ON l.label_id = i.label_id
  LEFT JOIN label_intents it ON it.request_id = NULLIF(il.reference, '')
 WHERE i.run_id = $1 AND i.category = $2::text::reconcile_category AND i.invoice_no IS NOT NULL
 ORDER BY i.line_no, i.invoice_no`

// claimsSQL reads the references and carrier keys of every invoice line
// billed in [$2, $3) (the run's window) that bills one of the carrier labels
// $1: the requests and keys a carrier label was bought for, as the carrier
// says, even when the line asked about names neither.
const claimsSQL = `
SELECT DISTINCT carrier_label_id, reference, idempotency_key
  FROM invoice_lines
 WHERE billed_at >= $2 AND billed_at < $3 AND carrier_label_id = ANY ($1::text[])
   AND (reference <> '' OR idempotency_key <> '')`

// claim is one way an intent of ours may receive a carrier label: the
// reference or carrier key of an invoice line billing it. own is true for
// the line the void is asked for, false for another line of the label.
type claim struct {
	own      bool
	ref, key string
}

// guardSQL is the rule no void breaks, for the carrier labels $1 with their
// claims ($2 the label's place in $1, from 1; $3 own; $4 reference; $5
// carrier key): a label of ours holds it, a completed key's saved response
// names it, or an intent a claim names is still pending (its next attempt
// may record it: a pending intent is leased, retrying or waiting, never
// final). It gives the reason to keep each, or NULL. An intent is found by
// reference through its primary key, and by carrier key among the pending
// intents (label_intents has no index on its carrier key; the pending ones
// are few, and have an index of their own). With $6 every completed key is
// read, once for all the labels asked about (a plan); without, only the keys
// of the intents the references name, by their primary key (the job's check
// before its call: a label recorded since the plan commits with its labels
// row and its key in one transaction, so the labels row alone would tell).
const guardSQL = `
WITH t AS (SELECT cl, n FROM unnest($1::text[]) WITH ORDINALITY AS t(cl, n)),
     c AS MATERIALIZED (
       SELECT DISTINCT n, own, NULLIF(ref, '') AS ref, NULLIF(ckey, '') AS ckey
         FROM unnest($2::int[], $3::boolean[], $4::text[], $5::text[]) AS c(n, own, ref, ckey)),
     named AS MATERIALIZED (
       SELECT k.response_body ->> 'carrier_label_id' AS cl, k.caller_id, k.idem_key
         FROM idempotency_keys k
        WHERE $6::boolean AND k.state = 'completed' AND k.response_status = 201
          AND k.response_body ->> 'carrier_label_id' = ANY ($1::text[])),
     by_ref AS MATERIALIZED (
       SELECT c.n, c.own, i.request_id, i.caller_id, i.idem_key, i.status
         FROM c JOIN label_intents i ON i.request_id = c.ref),
     by_key AS MATERIALIZED (
       SELECT c.n, c.own, i.request_id
         FROM c JOIN (SELECT request_id, carrier_key FROM label_intents
                       WHERE status = 'pending' AND carrier_key IN (SELECT ckey FROM c)) i ON i.carrier_key = c.ckey),
     pending AS (
       SELECT DISTINCT ON (n) n, request_id, via
         FROM (SELECT n, request_id, own, 1 AS o, CASE WHEN own THEN 'the line''s reference' ELSE 'the reference of another line billing it' END AS via
                 FROM by_ref WHERE status = 'pending'
               UNION ALL
               SELECT n, request_id, own, 2, CASE WHEN own THEN 'the line''s carrier key' ELSE 'the carrier key of another line billing it' END
                 FROM by_key) x
        ORDER BY n, own DESC, o, request_id)
SELECT t.n,
       CASE WHEN l.label_id IS NOT NULL THEN 'label ' || l.label_id || ' holds ' || t.cl
            WHEN k.idem_key IS NOT NULL THEN 'the completed key ' || k.idem_key || ' of caller ' || k.caller_id || ' names ' || t.cl
            WHEN p.request_id IS NOT NULL THEN 'the intent ' || p.request_id || ' (named by ' || p.via || ') is still pending: its next attempt may record '
                                                || t.cl || '; decided again once it is final'
       END
  FROM t
  LEFT JOIN LATERAL (SELECT label_id FROM labels WHERE carrier_label_id = t.cl ORDER BY label_id LIMIT 1) l ON true
  LEFT JOIN LATERAL (
       SELECT caller_id, idem_key
         FROM (SELECT caller_id, idem_key FROM named WHERE named.cl = t.cl
               UNION ALL
               SELECT ik.caller_id, ik.idem_key FROM by_ref r
                 JOIN idempotency_keys ik ON ik.caller_id = r.caller_id AND ik.idem_key = r.idem_key
                WHERE r.n = t.n AND ik.state = 'completed' AND ik.response_status = 201
                  AND ik.response_body ->> 'carrier_label_id' = t.cl) x
        ORDER BY caller_id, idem_key LIMIT 1) k ON true
  LEFT JOIN pending p ON p.n = t.n
 ORDER BY t.n`

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// guard returns, for each carrier label with its claims, the reason it must
// not be voided, or "". allKeys reads every completed key (see guardSQL).
func guard(ctx context.Context, db querier, cls []string, claims [][]claim, allKeys bool) ([]string, error) {
	var ns []int32
	var owns []bool
	var refs, keys []string
	for i, cs := range claims {
		for _, c := range cs {
			ns, owns, refs, keys = append(ns, int32(i+1)), append(owns, c.own), append(refs, c.ref), append(keys, c.key)
		}
	}
	rows, err := db.Query(ctx, guardSQL, cls, ns, owns, refs, keys, allKeys)
	if err != nil {
		return nil, fmt.Errorf("void guard: %w", err)
	}
	defer rows.Close()
	out := make([]string, len(cls))
	for rows.Next() {
		var n int
		var reason *string
		if err := rows.Scan(&n, &reason); err != nil {
			return nil, err
		}
		if reason != nil {
			out[n-1] = *reason
		}
	}
	return out, rows.Err()
}

// readClaims returns, per carrier label of cls, the references and carrier
// keys of the lines billing it around the run's period (its billing days,
// and DefaultWindow either side, as a run looks).
func readClaims(ctx context.Context, db querier, cls []string, period []time.Time) (map[string][]claim, error) {
	out := map[string][]claim{}
	if len(period) == 0 || len(cls) == 0 {
		return out, nil
	}
	lo, hi := period[0], period[0]
	for _, d := range period {
		lo, hi = minTime(lo, d), maxTime(hi, d)
	}
	rows, err := db.Query(ctx, claimsSQL, cls, lo.Add(-DefaultWindow), hi.Add(24*time.Hour+DefaultWindow))
	if err != nil {
		return nil, fmt.Errorf("void: the lines billing the labels: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var cl string
		var c claim
		if err := rows.Scan(&cl, &c.ref, &c.key); err != nil {
			return nil, err
		}
		out[cl] = append(out[cl], c)
	}
	return out, rows.Err()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// planVoids lists the run's items of the category, each kept (with the
// reason) or to be voided (Outcome ""), and the claims on the carrier
// labels of those to void.
func planVoids(ctx context.Context, pool *pgxpool.Pool, runID int64, category string, period []time.Time) ([]VoidItem, map[string][]claim, error) {
	rows, err := pool.Query(ctx, planSQL, runID, category)
	if err != nil {
		return nil, nil, fmt.Errorf("void: read run %d: %w", runID, err)
	}
	var items []VoidItem
	var after []*string
	for rows.Next() {
		var it VoidItem
		var kept, keptAfter *string
		dest := it.appendDest([]any{&it.InvoiceNo, &it.LineNo, &it.BilledAt})
		if err := rows.Scan(append(dest, &it.AmountCents, &it.Currency, &kept, &keptAfter)...); err != nil {
			rows.Close()
			return nil, nil, err
		}
		it.BilledAt = it.BilledAt.UTC()
		if kept != nil {
			it.Outcome, it.Detail = VoidKept, *kept
		}
		items, after = append(items, it), append(after, keptAfter)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("void: read run %d: %w", runID, err)
	}
	var cls []string
	var idx []int
	for i, it := range items {
		if it.Outcome == "" {
			cls, idx = append(cls, it.CarrierLabelID), append(idx, i)
		}
	}
	if len(cls) == 0 {
		return items, nil, nil
	}
	others, err := readClaims(ctx, pool, cls, period)
	if err != nil {
		return nil, nil, err
	}
	claims := make([][]claim, len(cls))
	for j, i := range idx {
		claims[j] = append([]claim{{own: true, ref: items[i].Reference, key: items[i].CarrierKey}}, others[cls[j]]...)
	}
	reasons, err := guard(ctx, pool, cls, claims, true)
	if err != nil {
		return nil, nil, err
	}
	byLabel := map[string][]claim{}
	for j, i := range idx {
		switch {
		case reasons[j] != "":
			items[i].Outcome, items[i].Detail = VoidKept, reasons[j]
		case after[i] != nil:
			items[i].Outcome, items[i].Detail = VoidKept, *after[i]
		default:
			byLabel[cls[j]] = append(byLabel[cls[j]], claims[j]...)
		}
	}
	return items, byLabel, nil
}

// requestSQL records the voids asked for, one statement for all: a label
// never asked for is inserted (the first item of the call that names it
// tells its charge) with the references and carrier keys of its claims ($10
// to $12, for the job's guard), one whose void failed is asked again (with
// the claims of this plan), the others are left as they are; the run's items
// are linked to their label. It returns the labels whose void is to be done
// (no outcome yet), for their jobs.
const requestSQL = `
WITH t AS (
       SELECT * FROM unnest($2::text[], $3::text[], $4::int[], $5::bigint[], $6::text[], $7::text[])
                  WITH ORDINALITY AS t(cl, inv, line, cents, cur, void_key, n)),
     cc AS (
       SELECT cl, coalesce(array_agg(DISTINCT ref ORDER BY ref) FILTER (WHERE ref <> ''), '{}') AS refs,
              coalesce(array_agg(DISTINCT ckey ORDER BY ckey) FILTER (WHERE ckey <> ''), '{}') AS keys
         FROM unnest($10::text[], $11::text[], $12::text[]) AS c(cl, ref, ckey)
        GROUP BY cl),
     up AS (
       INSERT INTO reconcile_voids AS v (carrier_label_id, void_key, run_id, invoice_no, line_no, category,
                                         charge_cents, currency, requested_at, claim_refs, claim_keys)
       SELECT DISTINCT ON (t.cl) t.cl, void_key, $1, inv, line, $8, cents, cur, $9,
              coalesce(cc.refs, '{}'), coalesce(cc.keys, '{}')
         FROM t LEFT JOIN cc ON cc.cl = t.cl ORDER BY t.cl, n
       ON CONFLICT (carrier_label_id) DO UPDATE
          SET outcome = NULL, detail = NULL, attempts = 0, requested_at = EXCLUDED.requested_at, answered_at = NULL,
              claim_refs = EXCLUDED.claim_refs, claim_keys = EXCLUDED.claim_keys
        WHERE v.outcome = 'failed'
       RETURNING v.carrier_label_id),
     linked AS (
       INSERT INTO reconcile_void_items (run_id, invoice_no, line_no, carrier_label_id, requested_at)
       SELECT $1, inv, line, cl, $9 FROM t
       ON CONFLICT DO NOTHING)
SELECT DISTINCT t.cl
  FROM t LEFT JOIN reconcile_voids v ON v.carrier_label_id = t.cl
 WHERE v.carrier_label_id IS NULL OR v.outcome IS NULL OR t.cl IN (SELECT carrier_label_id FROM up)
 ORDER BY 1`

// requestVoids records the targets of items and enqueues their jobs, in one
// transaction: a void recorded has its job, and a job has its record.
func requestVoids(ctx context.Context, pool *pgxpool.Pool, opts VoidOpts, items []VoidItem, claims map[string][]claim, now time.Time) error {
	var cls, invs, curs, keys []string
	var lines []int32
	var cents []int64
	for _, it := range items {
		if it.Outcome == VoidKept {
			continue
		}
		cls, invs, lines = append(cls, it.CarrierLabelID), append(invs, it.InvoiceNo), append(lines, int32(it.LineNo))
		cents, curs = append(cents, it.AmountCents), append(curs, it.Currency)
		keys = append(keys, carrier.DeriveVoidKey(it.CarrierLabelID))
	}
	var claimCLs, claimRefs, claimKeys []string
	for cl, cs := range claims {
		for _, c := range cs {
			claimCLs, claimRefs, claimKeys = append(claimCLs, cl), append(claimRefs, c.ref), append(claimKeys, c.key)
		}
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, requestSQL, opts.RunID, cls, invs, lines, cents, curs, keys, opts.Category, now,
			claimCLs, claimRefs, claimKeys)
		if err != nil {
			return fmt.Errorf("void: record the requests: %w", err)
		}
		todo, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("void: record the requests: %w", err)
		}
		if len(todo) == 0 {
			return nil
		}
		if err := opts.Enqueue(ctx, tx, todo); err != nil {
			return fmt.Errorf("void: enqueue the jobs: %w", err)
		}
		return nil
	})
}

// voidState is what reconcile_voids says of one carrier label.
type voidState struct {
	outcome  string // "" while pending
	detail   string
	voidedAt *time.Time
}

func readVoids(ctx context.Context, db querier, cls []string) (map[string]voidState, error) {
	rows, err := db.Query(ctx, `
		SELECT carrier_label_id, coalesce(outcome, ''), coalesce(detail, ''), voided_at
		  FROM reconcile_voids WHERE carrier_label_id = ANY ($1::text[])`, cls)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]voidState{}
	for rows.Next() {
		var cl string
		var s voidState
		if err := rows.Scan(&cl, &s.outcome, &s.detail, &s.voidedAt); err != nil {
			return nil, err
		}
		if s.voidedAt != nil {
			t := s.voidedAt.UTC()
			s.voidedAt = &t
		}
		out[cl] = s
	}
	return out, rows.Err()
}

// waitVoids reads the outcomes of cls until each has one, opts.Wait has
// passed, or ctx ends (then what is known is returned, not an error).
func waitVoids(ctx context.Context, pool *pgxpool.Pool, cls []string, opts VoidOpts) (map[string]voidState, error) {
	poll := opts.PollInterval
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	deadline := time.Now().Add(opts.Wait)
	for {
		states, err := readVoids(context.WithoutCancel(ctx), pool, cls)
		if err != nil {
			return nil, fmt.Errorf("void: read the outcomes: %w", err)
		}
		done := true
		for _, cl := range cls {
			if states[cl].outcome == "" {
				done = false
			}
		}
		if done || opts.DryRun || !time.Now().Before(deadline) {
			return states, nil
		}
		t := time.NewTimer(min(poll, time.Until(deadline)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return states, nil
		}
	}
}

// fill sets each target's outcome from states, and the counts.
func (r *VoidReport) fill(states map[string]voidState) {
	r.Counts = map[string]int{}
	for _, o := range voidOutcomeOrder {
		r.Counts[o] = 0
	}
	r.Recovered = map[string]int64{}
	counted := map[string]bool{}
	for i := range r.Items {
		it := &r.Items[i]
		if it.Outcome != VoidKept {
			s, ok := states[it.CarrierLabelID]
			switch {
			case r.DryRun && s.outcome == VoidFailed:
				it.Outcome, it.Detail = VoidWouldVoid, "asked again: its last void failed: "+s.detail
			case ok && s.outcome != "":
				it.Outcome, it.Detail, it.VoidedAt = s.outcome, s.detail, s.voidedAt
			case r.DryRun && ok:
				it.Outcome, it.Detail = VoidWouldVoid, "asked for before; no answer yet"
			case r.DryRun:
				it.Outcome, it.Detail = VoidWouldVoid, ""
			default:
				it.Outcome, it.Detail = VoidPending, "no answer yet: the void job is queued or retrying; run the command again to see its outcome"
			}
			if it.Outcome == VoidVoided && !counted[it.CarrierLabelID] {
				counted[it.CarrierLabelID] = true
				r.Recovered[it.Currency] += it.AmountCents
			}
		}
		r.Counts[it.Outcome]++
	}
}

// VoidAttempt is what a void job needs to call the carrier.
type VoidAttempt struct {
	CarrierLabelID string
	VoidKey        string
	// Reference and CarrierKey are the reference and the carrier key
	// (idempotency_key) of the invoice line the void was asked for.
	Reference  string
	CarrierKey string
	// ClaimRefs and ClaimKeys are the references and carrier keys of the
	// lines billing the label that the plan found (the line's own among
	// them); empty for a void asked for before they were kept.
	ClaimRefs []string
	ClaimKeys []string
	// ChargeCents and Currency are that line's charge.
	ChargeCents int64
	Currency    string
	// Attempts counts the carrier calls of this request, this one included.
	Attempts int
}

// TakeVoidAttempt counts one carrier call for the void of carrierLabelID and
// returns what it needs; ok is false when the void has an outcome already
// (nothing to do). It does not hold a lock: a job is unique per label while
// it runs, and a second call for the same label is a replay at the carrier.
func TakeVoidAttempt(ctx context.Context, pool *pgxpool.Pool, carrierLabelID string) (a VoidAttempt, ok bool, err error) {
	err = pool.QueryRow(ctx, `
		UPDATE reconcile_voids v SET attempts = v.attempts + 1
		  FROM invoice_lines il
		 WHERE v.carrier_label_id = $1 AND v.outcome IS NULL
		   AND il.invoice_no = v.invoice_no AND il.line_no = v.line_no
		RETURNING v.carrier_label_id, v.void_key, il.reference, il.idempotency_key, v.claim_refs, v.claim_keys,
		          v.charge_cents, v.currency, v.attempts`, carrierLabelID).
		Scan(&a.CarrierLabelID, &a.VoidKey, &a.Reference, &a.CarrierKey, &a.ClaimRefs, &a.ClaimKeys,
			&a.ChargeCents, &a.Currency, &a.Attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, false, nil
	}
	if err != nil {
		return a, false, fmt.Errorf("void %s: %w", carrierLabelID, err)
	}
	return a, true, nil
}

// GuardVoid is the rule no void breaks, checked again just before the
// carrier call: the reason the label of a must not be voided, or "". The
// label is kept when a label of ours holds it, when the completed key of an
// intent its lines' references name names it (the plan read every completed
// key), or when an intent that may still receive it is pending: named by the
// reference or the carrier key of a's line, or of another line billing the
// label (a's claims).
func GuardVoid(ctx context.Context, pool *pgxpool.Pool, a VoidAttempt) (string, error) {
	cs := []claim{{own: true, ref: a.Reference, key: a.CarrierKey}}
	for _, r := range a.ClaimRefs {
		cs = append(cs, claim{ref: r})
	}
	for _, k := range a.ClaimKeys {
		cs = append(cs, claim{key: k})
	}
	reasons, err := guard(ctx, pool, []string{a.CarrierLabelID}, [][]claim{cs}, false)
	if err != nil {
		return "", err
	}
	return reasons[0], nil
}

// VoidResult is the outcome a void job records.
type VoidResult struct {
	Outcome string // one of VoidOutcomes
	Detail  string
	// VoidedAt and CreditCents, for VoidVoided: the carrier's time of the
	// void and the label's cost it refunds.
	VoidedAt    time.Time
	CreditCents int64
}

// RecordVoid saves the outcome of the void of carrierLabelID, if it has none
// yet; recorded is false when another attempt recorded one first.
func RecordVoid(ctx context.Context, pool *pgxpool.Pool, carrierLabelID string, res VoidResult) (recorded bool, err error) {
	var voidedAt, credit any
	if res.Outcome == VoidVoided {
		voidedAt, credit = res.VoidedAt, res.CreditCents
	}
	tag, err := pool.Exec(ctx, `
		UPDATE reconcile_voids
		   SET outcome = $2, detail = NULLIF($3, ''), voided_at = $4, credit_cents = $5, answered_at = now()
		 WHERE carrier_label_id = $1 AND outcome IS NULL`,
		carrierLabelID, res.Outcome, res.Detail, voidedAt, credit)
	if err != nil {
		return false, fmt.Errorf("record the void of %s: %w", carrierLabelID, err)
	}
	return tag.RowsAffected() == 1, nil
}
