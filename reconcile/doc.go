// Package reconcile matches a carrier invoice against our labels and completed
// keys: the nightly backstop that finds what slipped through the keys (a
// purchase whose reply was lost under another key, a downstream call without
// a key, a crash at the wrong moment, a carrier billing error).
//
// # Where the data comes from
//
// The invoice is the carrier's CSV (docs/carrier.md), read from a file
// or fetched by day, a line at a time within the bounds of [BoundedInvoice]
// (64 KiB a line, 255 bytes a field). The labels, the label intents and the
// key records are read, never written: they belong to package postgres.
// This package owns the tables of migration 002: invoice_lines (every line
// ever imported, once), reconcile_runs (one row per run, with its counts),
// reconcile_items (the items of every run, one partition per run), the view
// reconcile_item_details, and the unlogged scratch table
// reconcile_scratch_labels; and those of migration 008, the voids:
// reconcile_voids (one row per carrier label asked to be voided, with its
// outcome, and, since migration 013, the references and carrier keys of the
// lines billing it) and reconcile_void_items (the runs' items it was asked
// for).
//
// # Voids
//
// [Void] voids, at the carrier, the extra purchases a saved run found (the
// duplicate charges, or the labels bought under our carrier keys that no
// label of ours holds), never a carrier label a label or a completed key of
// ours names, nor one an intent still pending may receive (the intent the
// reference or carrier key of any line billing the label names): it records
// the requests and enqueues one job per label in one transaction, and waits
// for the outcomes the job records ([TakeVoidAttempt], [GuardVoid],
// [RecordVoid]). The next run nets each void's credit line
// against its charge: both are [Voided].
//
// # A run
//
// [Run] does everything in one transaction, so that a run that fails leaves
// nothing behind:
//
//  1. It imports the invoice. A file never seen is one COPY straight into
//     invoice_lines (binary, encoded as it is read). A file with lines seen
//     before goes through a temporary table: a line with the same content
//     changes nothing, a line with other content under the same
//     (invoice_no, line_no) is a [*ParseError] naming it, and nothing of the
//     file is imported.
//  2. Its period is the set of UTC billing days of the file's lines (and the
//     day it was fetched for). Meanwhile, on a second connection, the labels
//     created in the window (the period and a day either side,
//     [Opts.Window]) are joined with their key records into the scratch
//     table: it does not depend on the lines, so both cores work.
//  3. One hash join matches every line of the window to a label by carrier
//     idempotency key. The few lines left are matched by carrier label id,
//     then tracking number, then reference, through the labels' indexes; an
//     id never matches the label of another request than the one the line's
//     reference or carrier key names ([CarrierIDConflict] when the line finds
//     no label of its own request).
//  4. Lines are grouped by label (lines with no label by what they share). In
//     a group, each credit of −X reverses a charge of X; the first charge
//     left is the label's own (billed under its carrier label id if one is);
//     further charges are duplicates; the label's billed amount is that charge
//     plus the credits that reversed nothing.
//  5. One statement decides every category and writes the items, unsorted,
//     into the run's own table, attached to reconcile_items at the end.
//
// Every line of the file and every label of the period is in exactly one
// item, and so in one category (see [Categories]); completed keys naming a
// label that does not exist and intents stuck in pending are items too.
// Unbilled labels younger than [Opts.Grace] are counted
// ([Report.LabelsInGrace]) but not reported.
//
// # Reports
//
// A [Report] is a saved run. [Report.WriteText] is the summary a person reads;
// [Report.WriteJSON] and [Report.WriteCSV] list every item with the ids to act
// on, streamed from the database in report order. The text and CSV reports
// put a quote before any value a spreadsheet would run as a formula (OWASP's
// rule against CSV injection); the JSON report is exact. [Load] reads a past
// run. [Report.ExitCode] is the exit status of operations.md.
//
// See docs/reconcile.md for the rules in full, the scheduling, and the
// measurements.
package reconcile
