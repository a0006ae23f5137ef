package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// scope is what one run compares, in the terms of the SQL below.
type scope struct {
	runID       int64
	period      string    // the billing days, as a tstzmultirange literal
	lo, hi      time.Time // the window: [first day − Window, last day + 1 day + Window)
	graceBefore time.Time // a label created after this is in its grace period
	stuckBefore time.Time // an intent created before this and still pending is stuck
	staged      bool      // the lines of the run are those of rc_stage (see importResult)
	// repeatedKeys are the carrier keys the invoice bills more than once.
	repeatedKeys []string
}

// counted is one group of the saved items: category, currency and whether the
// items are invoice lines.
type counted struct {
	category string
	currency string
	line     bool
	n        int
	cents    int64
}

// labelKey is the test of has_key for label l against key record k of its
// request: the key is the label's own, completed with 201, and its saved Label
// names l. The saved body is compact JSON (labels.Label.Body), so a
// substring test settles almost every row without parsing JSON (a string
// value cannot hold an unescaped quote, so the match is the label_id member);
// a body written any other way is parsed.
const labelKey = `(k.caller_id = l.caller_id AND k.idem_key = l.created_by_key
	AND k.state = 'completed' AND k.response_status = 201
	AND (strpos(k.response_body::text, '"label_id":"' || l.label_id || '"') > 0
	     OR coalesce(k.response_body ->> 'label_id' = l.label_id, false)))`

// keyState says why a key record found for label l is not a completed key naming it.
const keyState = `CASE WHEN k.caller_id <> l.caller_id OR k.idem_key <> l.created_by_key THEN 'the key record of the request is under another key'
	WHEN k.state <> 'completed' THEN 'the key record is still started'
	WHEN k.response_status <> 201 THEN 'the key record saved status ' || k.response_status
	ELSE 'the key record names another label' END`

// The statements of a run, in order. Each is one set-based pass; none loops
// over rows. The one temporary table (ON COMMIT DROP) is not WAL-logged.
var (
	// The labels created in the window, each with the key record of its
	// request (joined on request_id) and whether that is a completed key
	// naming the label (has_key; NULL when no record was found in the
	// window); and the completed keys of the period whose request has no label
	// (label_id NULL): candidates for key_without_label. It does not depend on
	// the invoice's lines, so it runs while they are imported.
	sqlScratchLabels = `
INSERT INTO reconcile_scratch_labels
SELECT x.label_id, x.carrier_key, x.carrier_label_id, x.cost_cents, x.currency, x.created_at, x.in_period, x.has_key,
       CASE WHEN NOT x.has_key THEN x.key_state END, x.k_caller, x.k_key, x.k_request, x.k_body
  FROM (SELECT l.label_id, l.carrier_key, l.carrier_label_id, l.cost_cents, l.currency, l.created_at,
               l.created_at <@ $3::tstzmultirange AS in_period,
               CASE WHEN l.label_id IS NULL OR k.request_id IS NULL THEN NULL ELSE ` + labelKey + ` END AS has_key,
               CASE WHEN l.label_id IS NULL OR k.request_id IS NULL THEN NULL ELSE ` + keyState + ` END AS key_state,
               CASE WHEN l.label_id IS NULL THEN k.caller_id END AS k_caller,
               CASE WHEN l.label_id IS NULL THEN k.idem_key END AS k_key,
               CASE WHEN l.label_id IS NULL THEN k.request_id END AS k_request,
               CASE WHEN l.label_id IS NULL THEN k.response_body::text END AS k_body
          FROM (SELECT label_id, caller_id, request_id, carrier_key, carrier_label_id, cost_cents, currency,
                       created_by_key, created_at
                  FROM labels WHERE created_at >= $1 AND created_at < $2) l
          FULL JOIN (SELECT caller_id, idem_key, request_id, state, response_status, response_body, created_at
                       FROM idempotency_keys WHERE created_at >= $1 AND created_at < $2) k
            ON k.request_id = l.request_id
         WHERE l.label_id IS NOT NULL
            OR (k.state = 'completed' AND k.response_status = 201 AND k.created_at <@ $3::tstzmultirange)) x`

	// rc_m: in one pass, every invoice line of the window matched to a label
	// by carrier key; every label of the period no line matched by key
	// (invoice_no NULL); and the keys without a label of the scratch table.
	// The group a line is netted and deduplicated in is its label, or, with
	// no label, g (coalesce(g, label_id) below). maybe_more marks the rows
	// whose group may have more than one row: only those groups are ordered
	// (sqlItems). A line keeps its identifiers only while it has no label:
	// they are what the other ways of matching need; created_at is kept for
	// unbilled labels only (grace).
	sqlMatchByKey = `
CREATE TEMP TABLE rc_m ON COMMIT DROP AS
SELECT invoice_no, line_no, billed_at, l_cost, l_cur, in_report,
       l_cl, l_tr, l_key, l_ref, label_id, lab_cost, lab_cur,
       CASE WHEN invoice_no IS NULL THEN created_at END AS created_at,
       in_period, has_key, key_state, how, same_cl,
       CASE WHEN label_id IS NULL THEN g END AS g, maybe_more OR v_cl IS NOT NULL AS maybe_more,
       false AS rev, NULL::text AS h_caller, NULL::text AS h_key, NULL::text AS h_detail, false AS clash,
       k_caller, k_key, k_request, k_body,
       coalesce(vc, false) AS vc, v_cl, NULL::text AS v_inv, NULL::int AS v_line
  FROM (SELECT u.invoice_no, u.line_no, u.billed_at, u.cost_cents AS l_cost, u.currency AS l_cur, u.in_report,
               CASE WHEN lk.label_id IS NULL THEN u.carrier_label_id END AS l_cl,
               CASE WHEN lk.label_id IS NULL THEN u.tracking_no END AS l_tr,
               CASE WHEN lk.label_id IS NULL THEN u.idempotency_key END AS l_key,
               CASE WHEN lk.label_id IS NULL THEN u.reference END AS l_ref,
               lk.label_id, lk.cost_cents AS lab_cost, lk.currency AS lab_cur, lk.created_at,
               coalesce(lk.in_period, false) AS in_period, lk.has_key, lk.key_state,
               CASE WHEN u.invoice_no IS NOT NULL AND lk.label_id IS NOT NULL THEN 1 END::int2 AS how,
               lk.carrier_label_id = u.carrier_label_id AS same_cl,
               chr(1) || lk.k_request AS g,
               -- A line that may share its group: of another invoice, a credit,
               -- one the key did not match, or billed under a key the invoice
               -- repeats. Every other group is one line (or one label) alone.
               coalesce(NOT u.in_report OR u.cost_cents < 0 OR lk.label_id IS NULL
                        OR u.idempotency_key IN (SELECT unnest($4::text[])), false) AS maybe_more,
               lk.k_caller, lk.k_key, lk.k_request, lk.k_body,
               -- A void credit, and a charge of a carrier label some invoice
               -- credits for a void (sqlPairVoids pairs them): the few lines
               -- that keep their carrier label id.
               u.charge_type = 'void_credit' AS vc,
               CASE WHEN u.charge_type = 'void_credit'
                         OR u.carrier_label_id IN (SELECT c.carrier_label_id FROM invoice_lines c WHERE c.charge_type = 'void_credit')
                    THEN NULLIF(u.carrier_label_id, '') END AS v_cl
          FROM (SELECT i.invoice_no, i.line_no, i.billed_at, i.carrier_label_id, i.tracking_no, i.idempotency_key,
                       i.reference, i.cost_cents, i.currency, i.charge_type, r.in_report
                  FROM invoice_lines i, LATERAL (SELECT %[1]s AS in_report) r
                 WHERE i.billed_at >= $1 AND i.billed_at < $2
                   -- A line of another invoice only matters if it may bill a
                   -- label of the period or a label this invoice bills: without
                   -- a key (it may match otherwise), or under such a label's
                   -- key. The others stay out of every pass below.
                   AND (r.in_report OR i.idempotency_key = ''
                        OR i.idempotency_key IN (SELECT carrier_key FROM reconcile_scratch_labels WHERE in_period)
                        OR i.idempotency_key IN (SELECT j.idempotency_key FROM invoice_lines j
                                                  WHERE j.billed_at >= $1 AND j.billed_at < $2 AND %[2]s))) u
          FULL JOIN reconcile_scratch_labels lk ON lk.carrier_key = NULLIF(u.idempotency_key, '')
         WHERE u.invoice_no IS NOT NULL OR lk.in_period OR lk.label_id IS NULL) x`

	// For labels of the period whose key record was not in the window: look it
	// up by its primary key; when it is gone (purged after KEY_RETENTION) the
	// intent stands in for it, since the worker completes the key, inserts the
	// label and marks the intent succeeded in one transaction.
	sqlKeysOutsideWindow = `
UPDATE rc_m t SET has_key = f.ok, key_state = f.state
  FROM (SELECT l.label_id,
               CASE WHEN k.request_id IS NOT NULL THEN ` + labelKey + `
                    ELSE coalesce(i.status = 'succeeded' AND i.label_id = l.label_id, false) END AS ok,
               CASE WHEN k.request_id IS NOT NULL THEN CASE WHEN ` + labelKey + ` THEN NULL ELSE ` + keyState + ` END
                    WHEN i.request_id IS NULL THEN 'no key record and no intent'
                    WHEN i.status <> 'succeeded' THEN 'no key record, and the intent is ' || i.status
                    WHEN i.label_id <> l.label_id THEN 'no key record, and the intent names label ' || i.label_id END AS state
          FROM (SELECT DISTINCT label_id FROM rc_m WHERE in_period AND has_key IS NULL) m
          JOIN labels l ON l.label_id = m.label_id
          LEFT JOIN idempotency_keys k
                 ON k.caller_id = l.caller_id AND k.idem_key = l.created_by_key AND k.request_id = l.request_id
          LEFT JOIN LATERAL (SELECT * FROM label_intents i WHERE i.request_id = l.request_id) i ON true) f
 WHERE t.label_id = f.label_id AND t.in_period AND t.has_key IS NULL`

	// Two labels under one carrier key (possible only when a caller reuses a
	// key after it was purged) give a line two rows: keep the first label, and
	// let the other one stand alone. The fill tells whether any key is shared.
	sqlSharedKeys = `
SELECT EXISTS (SELECT FROM reconcile_scratch_labels WHERE carrier_key IS NOT NULL
                GROUP BY carrier_key HAVING count(*) > 1),
       (SELECT count(*) FROM reconcile_scratch_labels WHERE in_period)`
	sqlDedupeKeyMatches = `
DELETE FROM rc_m a USING rc_m b
 WHERE a.invoice_no = b.invoice_no AND a.line_no = b.line_no AND a.label_id > b.label_id`
	sqlRestoreLabels = `
INSERT INTO rc_m (label_id, lab_cost, lab_cur, created_at, in_period, has_key, key_state, g, rev)
SELECT s.label_id, s.cost_cents, s.currency, s.created_at, true, s.has_key, s.key_state, s.label_id, false
  FROM reconcile_scratch_labels s
 WHERE s.in_period AND s.label_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rc_m m WHERE m.label_id = s.label_id)`

	// Lines no carrier key matched, a few in a normal night, in one pass:
	// match them by carrier label id, then tracking number, then reference,
	// through the indexes of labels (a label matched so leaves its stand-alone
	// row); group the rest by what they share, so that one carrier key or
	// reference billed twice is a duplicate even with no label; and say what
	// the intent behind their reference became, so that the report names a
	// caller and a key.
	//
	// An id is not a request: a carrier numbers its labels again, recycles
	// them, or shares them across accounts. A label found by carrier label id
	// or tracking number is another request's when the line names a request
	// (its reference) or a carrier key that is not the label's: never matched
	// (the line may still find its own request's label by reference), and a
	// line left without a label for it is a carrier_id_conflict (clash, the
	// detail naming both requests).
	sqlUnmatched = `
WITH um AS MATERIALIZED (
       SELECT invoice_no, line_no, in_report, NULLIF(l_cl, '') AS cl, NULLIF(l_tr, '') AS tr,
              NULLIF(l_key, '') AS k, NULLIF(l_ref, '') AS ref
         FROM rc_m WHERE label_id IS NULL AND invoice_no IS NOT NULL),
     cand AS MATERIALIZED (
       SELECT c.*, c.how < 4 AND (c.request_id <> c.ref OR c.carrier_key <> c.k) AS clash
         FROM (SELECT um.invoice_no, um.line_no, 2 AS how, l.label_id, l.carrier_label_id = um.cl AS same_cl,
                      l.request_id, l.carrier_key, um.ref, um.k, 'the carrier label of' AS what, um.cl AS id
                 FROM um JOIN labels l ON l.carrier_label_id = um.cl AND l.created_at >= $1 AND l.created_at < $2
               UNION ALL
               SELECT um.invoice_no, um.line_no, 3, l.label_id, l.carrier_label_id = um.cl,
                      l.request_id, l.carrier_key, um.ref, um.k, 'the tracking number of', um.tr
                 FROM um JOIN labels l ON l.tracking_no = um.tr AND l.created_at >= $1 AND l.created_at < $2
               UNION ALL
               SELECT um.invoice_no, um.line_no, 4, l.label_id, l.carrier_label_id = um.cl,
                      l.request_id, l.carrier_key, um.ref, um.k, NULL, NULL
                 FROM um JOIN labels l ON l.request_id = um.ref AND l.created_at >= $1 AND l.created_at < $2) c),
     best AS MATERIALIZED (
       SELECT DISTINCT ON (invoice_no, line_no) invoice_no, line_no, how, label_id, same_cl
         FROM cand WHERE clash IS NOT TRUE
        ORDER BY invoice_no, line_no, how, label_id),
     -- The first clash of each line (by carrier label id, then tracking
     -- number), said in words.
     clash AS MATERIALIZED (
       SELECT DISTINCT ON (invoice_no, line_no) invoice_no, line_no,
              CASE WHEN request_id <> ref
                   THEN format('%s is %s label %s (request %s), not of request %s that the line''s reference names: not matched',
                               id, what, label_id, request_id, ref)
                   ELSE format('%s is %s label %s (request %s), bought under another carrier key than the line''s: not matched',
                               id, what, label_id, request_id) END AS detail
         FROM cand WHERE clash
        ORDER BY invoice_no, line_no, how, label_id),
     -- What is known of those labels: their row in rc_m, or, for a label of
     -- a neighbouring day no line matched by key, the labels table.
     info AS MATERIALIZED (
       SELECT DISTINCT ON (b.label_id) b.label_id,
              coalesce(m.lab_cost, l.cost_cents) AS lab_cost, coalesce(m.lab_cur, l.currency) AS lab_cur,
              l.created_at, coalesce(m.in_period, false) AS in_period, m.has_key, m.key_state,
              m.label_id IS NOT NULL AND m.invoice_no IS NULL AS alone
         FROM (SELECT DISTINCT label_id FROM best) b
         JOIN labels l ON l.label_id = b.label_id
         LEFT JOIN rc_m m ON m.label_id = b.label_id
        ORDER BY b.label_id, m.invoice_no NULLS FIRST),
     orphan AS (
       SELECT um.invoice_no, um.line_no,
              chr(2) || coalesce('k' || um.k, 'r' || um.ref, 'c' || um.cl, 't' || um.tr,
                                 'l' || um.invoice_no || ' ' || um.line_no) AS g,
              i.caller_id, i.idem_key, x.detail IS NOT NULL AS clash,
              concat_ws('; ', x.detail,
                        CASE WHEN i.status = 'succeeded' THEN 'the intent ' || i.request_id || ' has label ' || i.label_id || ', created outside the window'
                             WHEN i.request_id IS NOT NULL THEN 'the intent ' || i.request_id || ' is ' || i.status END) AS detail
         FROM um
         LEFT JOIN clash x ON x.invoice_no = um.invoice_no AND x.line_no = um.line_no
         LEFT JOIN LATERAL (SELECT * FROM label_intents i WHERE um.in_report AND i.request_id = um.ref) i ON true
        WHERE NOT EXISTS (SELECT 1 FROM best b WHERE b.invoice_no = um.invoice_no AND b.line_no = um.line_no)),
     fix AS (
       SELECT b.invoice_no, b.line_no, b.how, b.label_id, i.lab_cost, i.lab_cur, i.created_at, i.in_period,
              i.has_key, i.key_state, b.same_cl, b.label_id AS g, NULL::text AS h_caller, NULL::text AS h_key,
              NULL::text AS h_detail, false AS clash
         FROM best b JOIN info i USING (label_id)
       UNION ALL
       SELECT invoice_no, line_no, NULL, NULL, NULL, NULL, NULL, false, NULL, NULL, NULL, g, caller_id, idem_key,
              NULLIF(detail, ''), clash
         FROM orphan),
     upd AS (
       UPDATE rc_m m
          SET g = f.g, how = f.how, label_id = f.label_id, lab_cost = f.lab_cost,
              lab_cur = f.lab_cur, created_at = f.created_at, in_period = f.in_period, has_key = f.has_key,
              key_state = f.key_state, same_cl = f.same_cl, h_caller = f.h_caller, h_key = f.h_key, h_detail = f.h_detail,
              clash = f.clash
         FROM fix f
        WHERE m.invoice_no = f.invoice_no AND m.line_no = f.line_no AND m.label_id IS NULL
       RETURNING f.label_id)
DELETE FROM rc_m d
 WHERE d.invoice_no IS NULL AND d.label_id IN (SELECT label_id FROM info WHERE alone)
   AND EXISTS (SELECT 1 FROM upd)`

	// Void credits net against the charge of their own carrier label, on
	// whichever invoice and day each is: the carrier refunds the label it
	// voided. The charges are those of the window, and the charge a void of
	// ours was asked for (reconcile_voids), wherever it is; the credits come
	// from every invoice, through their partial index. The k-th charge of a
	// carrier label and amount pairs with its k-th credit, in billing order;
	// both are reversed (rev) and name each other (v_inv, v_line). A carrier
	// label a label of ours holds is left out: its credit nets as any other
	// credit (sqlPairCredits), and the label shows what it was billed.
	sqlPairVoids = `
WITH v AS MATERIALIZED (
       SELECT DISTINCT m.v_cl AS cl FROM rc_m m
        WHERE m.v_cl IS NOT NULL AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.carrier_label_id = m.v_cl)),
     credits AS (
       SELECT il.invoice_no, il.line_no, il.carrier_label_id AS cl, -il.cost_cents AS amount, il.currency, il.billed_at
         FROM invoice_lines il
        WHERE il.charge_type = 'void_credit' AND il.cost_cents < 0 AND il.carrier_label_id IN (SELECT cl FROM v)),
     charges AS (
       SELECT m.invoice_no, m.line_no, m.v_cl AS cl, m.l_cost AS amount, m.l_cur AS currency, m.billed_at
         FROM rc_m m
        WHERE m.v_cl IN (SELECT cl FROM v) AND NOT m.vc AND m.l_cost > 0 AND m.invoice_no IS NOT NULL
       UNION
       SELECT il.invoice_no, il.line_no, il.carrier_label_id, il.cost_cents, il.currency, il.billed_at
         FROM reconcile_voids rv
         JOIN invoice_lines il ON il.invoice_no = rv.invoice_no AND il.line_no = rv.line_no
        WHERE rv.carrier_label_id IN (SELECT cl FROM v) AND il.carrier_label_id = rv.carrier_label_id
          AND il.cost_cents > 0 AND il.charge_type <> 'void_credit'),
     pairs AS (
       SELECT c.invoice_no AS c_inv, c.line_no AS c_line, k.invoice_no AS k_inv, k.line_no AS k_line
         FROM (SELECT *, row_number() OVER (PARTITION BY cl, amount, currency ORDER BY billed_at, invoice_no, line_no) AS rk FROM charges) c
         JOIN (SELECT *, row_number() OVER (PARTITION BY cl, amount, currency ORDER BY billed_at, invoice_no, line_no) AS rk FROM credits) k
           USING (cl, amount, currency, rk)),
     ends AS (
       SELECT c_inv AS inv, c_line AS line, k_inv AS p_inv, k_line AS p_line FROM pairs
       UNION ALL
       SELECT k_inv, k_line, c_inv, c_line FROM pairs)
UPDATE rc_m m SET rev = true, v_inv = e.p_inv, v_line = e.p_line
  FROM ends e
 WHERE m.invoice_no = e.inv AND m.line_no = e.line AND m.v_cl IS NOT NULL`

	// Credits net against their charge: in a group, each credit of -X reverses
	// one charge of X, the least likely to be the label's own first (another
	// carrier label id, then the latest). A credit that reverses no charge
	// adjusts the group's amount instead.
	sqlPairCredits = `
WITH cg AS MATERIALIZED (SELECT DISTINCT coalesce(g, label_id) AS g FROM rc_m WHERE l_cost < 0)
UPDATE rc_m m SET rev = true
  FROM (SELECT invoice_no, line_no
          FROM (SELECT invoice_no, line_no, l_cost,
                       row_number() OVER (PARTITION BY coalesce(g, label_id), abs(l_cost), l_cost < 0
                                          ORDER BY same_cl NULLS FIRST, billed_at DESC, invoice_no DESC, line_no DESC) AS rk,
                       count(*) FILTER (WHERE l_cost > 0) OVER (PARTITION BY coalesce(g, label_id), abs(l_cost)) AS charges,
                       count(*) FILTER (WHERE l_cost < 0) OVER (PARTITION BY coalesce(g, label_id), abs(l_cost)) AS credits
                  FROM rc_m
                 WHERE invoice_no IS NOT NULL AND l_cost <> 0 AND NOT rev AND coalesce(g, label_id) IN (SELECT g FROM cg)) y
         WHERE rk <= CASE WHEN l_cost > 0 THEN credits ELSE charges END) r
 WHERE m.invoice_no = r.invoice_no AND m.line_no = r.line_no AND coalesce(m.g, m.label_id) IN (SELECT g FROM cg)`

	// One pass over the groups decides every category, and saves the items
	// in the same statement into the run's own table, reconcile_items_RUN
	// (unsorted: reports sort what they read). Category, subject and match
	// key are typed constants: a text cast per row would cost a catalog
	// lookup each.
	//
	// In a group (a label, or lines sharing a key) the first line is the
	// label's own charge: an unreversed charge, billed under the label's own
	// carrier label id if one is, else the earliest. Further unreversed charges
	// are duplicates. The label's billed amount is its first charge plus the
	// credits that reversed nothing; it is matched when that equals its cost.
	sqlItems = `
INSERT INTO reconcile_items_RUN (run_id, category, subject, invoice_no, line_no, label_id,
                             caller_id, idem_key, reference, carrier_key, amount_cents, currency, matched_by, detail)
WITH multi AS MATERIALIZED (SELECT DISTINCT coalesce(g, label_id) AS g FROM rc_m WHERE maybe_more),
     w AS (
       -- A group that may have several lines (a label billed twice, a charge
       -- and its credit…): its lines in order.
       SELECT m.*,
              row_number() OVER wo AS rk,
              sum(CASE WHEN m.l_cost < 0 AND NOT m.rev THEN m.l_cost ELSE 0 END) OVER wa AS partial,
              first_value(m.invoice_no) OVER wo AS p_inv,
              first_value(m.line_no) OVER wo AS p_line,
              first_value(CASE WHEN m.l_cost >= 0 AND NOT m.rev THEN m.l_cost END) OVER wo AS p_charge,
              first_value(m.l_cur) OVER wo AS p_cur,
              bool_and(m.v_inv IS NOT NULL) OVER wa AS all_voided
         FROM rc_m m
        WHERE coalesce(m.g, m.label_id) IN (SELECT g FROM multi)
       WINDOW wo AS (PARTITION BY coalesce(m.g, m.label_id) ORDER BY m.rev, m.v_inv IS NOT NULL, m.l_cost < 0, m.same_cl DESC NULLS LAST,
                     m.billed_at, m.invoice_no, m.line_no),
              wa AS (wo ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)),
     c AS (
       SELECT w.*,
              coalesce(w.p_charge, 0) + w.partial AS eff,
              CASE WHEN w.label_id IS NULL OR w.p_inv IS NULL THEN NULL
                   WHEN coalesce(w.p_charge, 0) + w.partial = w.lab_cost AND w.p_cur = w.lab_cur THEN 'matched'::reconcile_category
                   ELSE 'amount_mismatch'::reconcile_category END AS billing,
              w.l_cost >= 0 AND NOT w.rev AND w.rk > 1 AS dup,
              w.in_period AND NOT coalesce(w.has_key, false) AS no_key
         FROM w),
     items AS (
       -- Each row of c is at most one item: an invoice line of the run, or a
       -- label of the period whose own charge is not a line of the run (or
       -- that has none).
       SELECT CASE WHEN x.line AND x.v_inv IS NOT NULL THEN 'voided'::reconcile_category
                   WHEN NOT x.line THEN CASE WHEN x.no_key THEN 'label_without_key'::reconcile_category
                                             WHEN x.invoice_no IS NULL THEN 'label_not_billed'::reconcile_category
                                             ELSE x.billing END
                   WHEN x.clash THEN 'carrier_id_conflict'::reconcile_category
                   WHEN x.dup THEN 'duplicate_charge'::reconcile_category
                   WHEN x.label_id IS NULL THEN CASE WHEN x.rev THEN 'matched'::reconcile_category ELSE 'billed_without_label'::reconcile_category END
                   WHEN x.rk = 1 AND x.no_key THEN 'label_without_key'::reconcile_category
                   ELSE x.billing END AS category,
              CASE WHEN NOT x.line THEN 'label'::reconcile_subject
                   WHEN x.label_id IS NOT NULL AND x.rk = 1 AND x.in_period AND x.v_inv IS NULL THEN 'line+label'::reconcile_subject
                   ELSE 'line'::reconcile_subject END AS subject,
              CASE WHEN x.line THEN x.invoice_no END AS invoice_no,
              CASE WHEN x.line THEN x.line_no END AS line_no,
              x.label_id,
              x.h_caller AS caller_id, x.h_key AS idem_key, NULL::text AS reference, NULL::text AS carrier_key,
              CASE WHEN x.line AND x.v_inv IS NOT NULL THEN CASE WHEN x.vc THEN 0 ELSE x.l_cost END
                   WHEN x.line AND (x.dup OR x.label_id IS NULL) THEN CASE WHEN x.rev THEN 0 ELSE x.l_cost END
                   WHEN x.line AND x.rk > 1 THEN 0
                   WHEN (x.rk = 1 AND x.no_key) OR x.invoice_no IS NULL THEN x.lab_cost
                   WHEN x.billing = 'amount_mismatch'::reconcile_category AND x.p_cur = x.lab_cur THEN x.eff - x.lab_cost
                   ELSE x.eff END AS amount_cents,
              CASE WHEN x.line AND (x.dup OR x.label_id IS NULL OR x.rk > 1 OR x.v_inv IS NOT NULL) THEN x.l_cur
                   WHEN (x.rk = 1 AND x.no_key) OR x.invoice_no IS NULL THEN x.lab_cur
                   ELSE x.p_cur END AS currency,
              CASE WHEN x.line THEN (ARRAY['idempotency_key', 'carrier_label_id', 'tracking_no', 'reference']::reconcile_match_key[])[x.how] END AS matched_by,
              CASE WHEN x.line AND x.v_inv IS NOT NULL AND x.vc THEN 'the credit of the void of ' || x.v_inv || ' line ' || x.v_line
                   WHEN x.line AND x.v_inv IS NOT NULL THEN 'voided: credited on ' || x.v_inv || ' line ' || x.v_line
                   WHEN x.line AND x.clash THEN x.h_detail
                   WHEN x.line AND x.dup THEN 'duplicate of ' || x.p_inv || ' line ' || x.p_line
                   WHEN x.line AND x.label_id IS NULL AND x.rev THEN 'a charge and a credit that cancel out'
                   WHEN x.line AND x.label_id IS NULL THEN x.h_detail
                   WHEN x.line AND x.rk > 1 THEN 'nets against ' || x.p_inv || ' line ' || x.p_line
                   WHEN x.no_key THEN coalesce(x.key_state, 'the key record names another label')
                   WHEN x.invoice_no IS NULL THEN NULL
                   WHEN x.billing = 'amount_mismatch'::reconcile_category AND x.line
                        THEN format('billed %s %s, label cost %s %s', x.eff, x.p_cur, x.lab_cost, x.lab_cur)
                   WHEN x.billing = 'amount_mismatch'::reconcile_category
                        THEN format('billed %s %s on %s line %s, label cost %s %s', x.eff, x.p_cur, x.p_inv, x.p_line, x.lab_cost, x.lab_cur)
                   WHEN NOT x.line THEN 'billed on ' || x.p_inv || ' line ' || x.p_line
              END AS detail
         FROM (SELECT c.*, coalesce(c.in_report, false) AS line FROM c) x
        WHERE x.line
           OR (x.label_id IS NOT NULL AND x.in_period AND x.rk = 1 AND x.v_inv IS NULL
               AND NOT (x.invoice_no IS NULL AND NOT x.no_key AND x.created_at > $2))
       UNION ALL
       -- A label of the period every line of whose group was voided (its own
       -- charge is on no invoice of the window): the label alone.
       SELECT CASE WHEN x.no_key THEN 'label_without_key'::reconcile_category ELSE 'label_not_billed'::reconcile_category END,
              'label'::reconcile_subject, NULL, NULL, x.label_id, NULL, NULL, NULL, NULL,
              x.lab_cost, x.lab_cur, NULL,
              CASE WHEN x.no_key THEN coalesce(x.key_state, 'the key record names another label') END
         FROM c x
        WHERE x.all_voided AND x.rk = 1 AND x.label_id IS NOT NULL AND x.in_period
          AND (x.no_key OR NOT EXISTS (SELECT 1 FROM labels l WHERE l.label_id = x.label_id AND l.created_at > $2))
       UNION ALL
       -- Almost every group is one line: a label's only charge, or a line
       -- with no label; or a label alone, unbilled or billed elsewhere. Its
       -- line is its first and its amount its own: no order, no netting.
       SELECT CASE WHEN NOT m.line THEN CASE WHEN m.no_key THEN 'label_without_key'::reconcile_category
                                             WHEN m.invoice_no IS NULL THEN 'label_not_billed'::reconcile_category
                                             WHEN m.same THEN 'matched'::reconcile_category ELSE 'amount_mismatch'::reconcile_category END
                   WHEN m.label_id IS NULL THEN CASE WHEN m.clash THEN 'carrier_id_conflict'::reconcile_category
                                                     ELSE 'billed_without_label'::reconcile_category END
                   WHEN m.no_key THEN 'label_without_key'::reconcile_category
                   WHEN m.same THEN 'matched'::reconcile_category ELSE 'amount_mismatch'::reconcile_category END,
              CASE WHEN NOT m.line THEN 'label'::reconcile_subject WHEN m.in_period THEN 'line+label'::reconcile_subject ELSE 'line'::reconcile_subject END,
              CASE WHEN m.line THEN m.invoice_no END,
              CASE WHEN m.line THEN m.line_no END,
              m.label_id, m.h_caller, m.h_key, NULL, NULL,
              CASE WHEN m.same OR m.label_id IS NULL THEN m.l_cost
                   WHEN m.no_key OR m.invoice_no IS NULL THEN m.lab_cost
                   WHEN m.l_cur = m.lab_cur THEN m.l_cost - m.lab_cost
                   ELSE m.l_cost END,
              CASE WHEN m.same OR m.label_id IS NULL THEN m.l_cur
                   WHEN m.no_key OR m.invoice_no IS NULL THEN m.lab_cur
                   ELSE m.l_cur END,
              CASE WHEN m.line THEN (ARRAY['idempotency_key', 'carrier_label_id', 'tracking_no', 'reference']::reconcile_match_key[])[m.how] END,
              CASE WHEN m.same AND m.line THEN NULL
                   WHEN m.label_id IS NULL THEN m.h_detail
                   WHEN m.no_key THEN coalesce(m.key_state, 'the key record names another label')
                   WHEN m.invoice_no IS NULL THEN NULL
                   WHEN m.same THEN 'billed on ' || m.invoice_no || ' line ' || m.line_no
                   WHEN m.line THEN format('billed %s %s, label cost %s %s', m.l_cost, m.l_cur, m.lab_cost, m.lab_cur)
                   ELSE format('billed %s %s on %s line %s, label cost %s %s', m.l_cost, m.l_cur, m.invoice_no, m.line_no, m.lab_cost, m.lab_cur)
              END
         FROM (SELECT m.*, coalesce(m.in_report, false) AS line,
                      m.in_period AND NOT coalesce(m.has_key, false) AS no_key,
                      m.label_id IS NOT NULL AND NOT (m.in_period AND NOT coalesce(m.has_key, false))
                        AND m.l_cost = m.lab_cost AND m.l_cur = m.lab_cur AS same
                 FROM rc_m m
                WHERE coalesce(m.g, m.label_id) NOT IN (SELECT g FROM multi)
                  AND (m.in_report
                       OR (m.label_id IS NOT NULL AND m.in_period
                           AND NOT (m.invoice_no IS NULL AND coalesce(m.has_key, false) AND m.created_at > $2)))) m
       UNION ALL
       -- completed keys of the period naming a label that does not exist
       SELECT 'key_without_label'::reconcile_category, 'key'::reconcile_subject, NULL, NULL, o.named, o.k_caller, o.k_key, o.k_request, i.carrier_key,
              CASE WHEN o.cost ~ '^-?[0-9]{1,18}$' THEN o.cost::bigint END, o.currency, NULL,
              CASE WHEN o.named IS NULL THEN 'the saved response names no label'
                   ELSE 'the saved response names ' || o.named || ', which does not exist' END
         FROM (SELECT k_caller, k_key, k_request, k_body::json ->> 'label_id' AS named,
                      k_body::json ->> 'cost_cents' AS cost, k_body::json ->> 'currency' AS currency
                 FROM rc_m WHERE invoice_no IS NULL AND label_id IS NULL) o
         LEFT JOIN LATERAL (SELECT carrier_key FROM label_intents i WHERE i.request_id = o.k_request) i ON true
        WHERE NOT EXISTS (SELECT 1 FROM labels x WHERE x.label_id = o.named)
       UNION ALL
       -- intents of the period still pending after stuck-after
       SELECT 'stuck_intent'::reconcile_category, 'intent'::reconcile_subject, NULL, NULL, NULL, i.caller_id, i.idem_key, i.request_id, i.carrier_key,
              NULL, NULL, NULL,
              'pending since ' || to_char(i.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
         FROM label_intents i
        WHERE i.status = 'pending' AND i.created_at < $4 AND i.created_at <@ $3::tstzmultirange)
SELECT $1, category, subject, invoice_no, line_no, label_id, caller_id, idem_key, reference, carrier_key,
       amount_cents, currency, matched_by, detail
  FROM items`

	// The counts of the saved items.
	sqlCounts = `
SELECT category::text, coalesce(currency, ''), invoice_no IS NOT NULL, count(*), coalesce(sum(amount_cents), 0)
  FROM reconcile_items WHERE run_id = $1 GROUP BY 1, 2, 3`

	sqlLabelsInGrace = `
SELECT count(*) FROM rc_m WHERE invoice_no IS NULL AND in_period AND coalesce(has_key, false) AND created_at > $1`
)

// match runs the statements above in tx, the scratch table being filled, and
// returns the saved items, counted, the labels of the period and those left
// out in their grace period. facts tells what the scratch table holds.
func match(ctx context.Context, tx pgx.Tx, s scope, facts func() (scratchFacts, error), step func(string)) (groups []counted, labels, inGrace int, err error) {
	exec := func(name, sql string, args ...any) error {
		if step != nil {
			step(name)
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	// The lines of the run: those it stored, and, when some were imported
	// before, those of the staged file.
	inReport := func(t string) string {
		if s.staged {
			return fmt.Sprintf("(%[1]s.run_id = $3 OR EXISTS (SELECT 1 FROM rc_stage s WHERE s.invoice_no = %[1]s.invoice_no AND s.line_no = %[1]s.line_no))", t)
		}
		return t + ".run_id = $3"
	}
	if err := exec("match by carrier key", fmt.Sprintf(sqlMatchByKey, inReport("i"), inReport("j")), s.lo, s.hi, s.runID, s.repeatedKeys); err != nil {
		return nil, 0, 0, err
	}
	if err := exec("keys outside the window", sqlKeysOutsideWindow); err != nil {
		return nil, 0, 0, err
	}
	if step != nil {
		step("labels' facts")
	}
	f, err := facts()
	if err != nil {
		return nil, 0, 0, err
	}
	if f.sharedKeys {
		if err := exec("one label per line", sqlDedupeKeyMatches); err != nil {
			return nil, 0, 0, err
		}
		if err := exec("restore labels", sqlRestoreLabels); err != nil {
			return nil, 0, 0, err
		}
	}
	if err := exec("lines with no carrier key match", sqlUnmatched, s.lo, s.hi); err != nil {
		return nil, 0, 0, err
	}
	// Without a void credit in the database (its partial index is read),
	// no line can be voided and the pass is skipped.
	var voids bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM invoice_lines WHERE charge_type = 'void_credit')`).Scan(&voids); err != nil {
		return nil, 0, 0, fmt.Errorf("void credits: %w", err)
	}
	if voids {
		if err := exec("net void credits", sqlPairVoids); err != nil {
			return nil, 0, 0, err
		}
	}
	if err := exec("net credits", sqlPairCredits); err != nil {
		return nil, 0, 0, err
	}
	part := pgx.Identifier{fmt.Sprintf("reconcile_items_%d", s.runID)}.Sanitize()
	if err := exec("categorise and save items", fmt.Sprintf(`CREATE TABLE %s (LIKE reconcile_items, CHECK (run_id = %d))`, part, s.runID)); err != nil {
		return nil, 0, 0, err
	}
	if _, err := tx.Exec(ctx, strings.Replace(sqlItems, "reconcile_items_RUN", part, 1), s.runID, s.graceBefore, s.period, s.stuckBefore); err != nil {
		return nil, 0, 0, fmt.Errorf("save items: %w", err)
	}
	// The check constraint spares ATTACH a scan of the table; attaching takes
	// a lock that readers of the other runs do not wait for.
	if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE reconcile_items ATTACH PARTITION %s FOR VALUES IN (%d)`, part, s.runID)); err != nil {
		return nil, 0, 0, fmt.Errorf("attach the items: %w", err)
	}
	if err := tx.QueryRow(ctx, sqlLabelsInGrace, s.graceBefore).Scan(&inGrace); err != nil {
		return nil, 0, 0, fmt.Errorf("count labels: %w", err)
	}
	if err := exec("count items", `TRUNCATE reconcile_scratch_labels`); err != nil {
		return nil, 0, 0, err
	}
	rs, err := tx.Query(ctx, sqlCounts, s.runID)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("count items: %w", err)
	}
	for rs.Next() {
		var g counted
		if err := rs.Scan(&g.category, &g.currency, &g.line, &g.n, &g.cents); err != nil {
			rs.Close()
			return nil, 0, 0, err
		}
		groups = append(groups, g)
	}
	if err := rs.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("count items: %w", err)
	}
	return groups, f.labels, inGrace, nil
}

// periodRange writes days (UTC midnights) as a tstzmultirange literal.
func periodRange(days []time.Time) string {
	parts := make([]string, len(days))
	for i, d := range days {
		parts[i] = fmt.Sprintf("[%s,%s)", d.Format(time.RFC3339), d.AddDate(0, 0, 1).Format(time.RFC3339))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// scratchFacts is what the scratch table tells besides its rows.
type scratchFacts struct {
	sharedKeys bool // two labels of the window share a carrier key
	labels     int  // labels created in the period
}

// fillScratch computes the labels of the window with their keys into the
// scratch table, in tx.
func fillScratch(ctx context.Context, tx pgx.Tx, s scope) error {
	if _, err := tx.Exec(ctx, `TRUNCATE reconcile_scratch_labels`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sqlScratchLabels, s.lo, s.hi, s.period); err != nil {
		return fmt.Errorf("labels and keys: %w", err)
	}
	return nil
}

func scratchFactsOf(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (f scratchFacts, err error) {
	if err := db.QueryRow(ctx, sqlSharedKeys).Scan(&f.sharedKeys, &f.labels); err != nil {
		return f, fmt.Errorf("shared carrier keys: %w", err)
	}
	return f, nil
}

// scratchFill fills the scratch table on a connection of its own, and commits
// it there, while the main transaction imports the invoice; then it reads
// the facts of the table while the main transaction matches by key.
type scratchFill struct {
	scope     scope
	cancel    context.CancelFunc
	filled    chan error // the fill committed, or failed
	factsDone chan error // the facts are read, or failed; the goroutine is done
	facts     scratchFacts
}

func startScratchFill(ctx context.Context, pool *pgxpool.Pool, s scope) *scratchFill {
	ctx, cancel := context.WithCancel(ctx)
	f := &scratchFill{scope: s, cancel: cancel, filled: make(chan error, 1), factsDone: make(chan error, 1)}
	go func() {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			f.filled <- err
			f.factsDone <- err
			return
		}
		defer conn.Release()
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, set := range sessionSettings {
				if _, err := tx.Exec(ctx, set); err != nil {
					return err
				}
			}
			return fillScratch(ctx, tx, s)
		})
		f.filled <- err
		if err == nil {
			f.facts, err = scratchFactsOf(ctx, conn)
		}
		f.factsDone <- err
	}()
	return f
}

// waitFilled says whether the scratch table is filled for scope s.
func (f *scratchFill) waitFilled(s scope) bool {
	if f == nil || f.scope.period != s.period {
		return false
	}
	err := <-f.filled
	f.filled <- err
	return err == nil
}

// waitFacts returns the facts, once read.
func (f *scratchFill) waitFacts() (scratchFacts, error) {
	err := <-f.factsDone
	f.factsDone <- err
	return f.facts, err
}

// stop abandons the fill and waits for its goroutine, so that the scratch
// table is free afterwards.
func (f *scratchFill) stop() {
	if f != nil {
		f.cancel()
		_, _ = f.waitFacts()
	}
}
