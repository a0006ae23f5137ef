package reconcile_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/reconcile"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// at is a time on the billing day.
func at(hhmmss string) time.Time {
	t, err := time.Parse("15:04:05", hhmmss)
	if err != nil {
		panic(err)
	}
	return day.Add(time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second)
}

// everyCategory seeds one case of each category (and of each way to match),
// and returns the invoice that goes with them.
func everyCategory(t *testing.T, b *testBundle) string {
	t.Helper()
	s := map[int]seed{}
	for _, sd := range []seed{
		{n: 1, createdAt: at("02:00:00")},
		{n: 2, createdAt: at("02:10:00")},
		{n: 3, createdAt: at("02:20:00")},
		{n: 4, createdAt: at("03:00:00")},                      // not billed, past grace
		{n: 5, createdAt: at("20:00:00")},                      // not billed, in grace
		{n: 6, createdAt: at("04:00:00")},                      // billed twice, credited once
		{n: 7, createdAt: at("04:10:00"), key: "started"},      // label, key never completed
		{n: 8, createdAt: at("04:15:00"), key: "ghost"},        // key names a label that does not exist
		{n: 9, createdAt: at("01:00:00"), intent: "pending"},   // stuck, and billed (reply lost)
		{n: 10, createdAt: at("04:20:00")},                     // matched by carrier label id
		{n: 11, createdAt: at("04:30:00")},                     // matched by reference
		{n: 12, createdAt: at("04:40:00"), key: "purged"},      // key purged, intent succeeded
		{n: 13, createdAt: at("04:50:00")},                     // partial credit
		{n: 14, createdAt: day.Add(-30 * time.Second)},         // created the day before
		{n: 15, createdAt: at("05:00:00"), key: "other_label"}, // key names another label
		{n: 16, createdAt: at("05:10:00")},                     // billed in another currency
		{n: 17, createdAt: at("05:20:00"), intent: "failed"},   // bought, reply lost, saved 502
	} {
		s[sd.n] = sd
	}
	insertSeeds(t, b.pool, mapValues(s))

	l := func(n, lineNo int) string { return s[n].line(lineNo, s[n].createdAt.Add(time.Second)) }
	withCost := func(line string, cost string) string {
		f := strings.Split(line, ",")
		f[7] = cost
		return strings.Join(f, ",")
	}
	withFields := func(line string, idx []int, v ...string) string {
		f := strings.Split(line, ",")
		for i, j := range idx {
			f[j] = v[i]
		}
		return strings.Join(f, ",")
	}
	return invoice(
		l(1, 1),
		l(2, 2), l(2, 3),
		withCost(l(3, 4), "762"),
		"INV-20261202,5,2026-12-02T02:30:00Z,CL-F9001,GRD000777001-X,,,845,USD",
		l(6, 6), l(6, 7), withCost(l(6, 8), "-612"),
		l(7, 9),
		l(9, 10),
		withFields(l(10, 11), []int{4, 5, 6}, "", "", ""),
		withFields(l(11, 12), []int{3, 4, 5}, "CL-7777", "GRD000000777", ""),
		l(12, 13),
		withCost(l(13, 14), "700"), withCost(l(13, 15), "-88"),
		withFields(l(14, 16), []int{0, 2}, "INV-20261202", "2026-12-02T00:00:05Z"),
		l(15, 17),
		withFields(l(16, 18), []int{8}, "EUR"),
		"INV-20261202,19,2026-12-02T05:30:00Z,CL-F9002,GRD000777002-X,,,500,USD",
		"INV-20261202,20,2026-12-02T05:31:00Z,CL-F9002,GRD000777002-X,,,-500,USD",
		l(17, 21),
	)
}

func mapValues(m map[int]seed) []seed {
	out := make([]seed, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestEveryCategory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep := b.run(t, everyCategory(t, b))

	require.Equal(t, counts(
		reconcile.Matched, 13, reconcile.BilledWithoutLabel, 3, reconcile.DuplicateCharge, 1,
		reconcile.AmountMismatch, 2, reconcile.LabelNotBilled, 1, reconcile.KeyWithoutLabel, 1,
		reconcile.LabelWithoutKey, 2, reconcile.StuckIntent, 1), rep.Counts)
	require.Equal(t, map[string]string{
		"INV-20261202/1": "matched",
		"INV-20261202/2": "matched", "INV-20261202/3": "duplicate_charge",
		"INV-20261202/4": "amount_mismatch",
		"INV-20261202/5": "billed_without_label",
		"lbl_0004":       "label_not_billed",
		"INV-20261202/6": "matched", "INV-20261202/7": "matched", "INV-20261202/8": "matched",
		"INV-20261202/9":        "label_without_key",
		"key label:918008:1:v1": "key_without_label",
		"INV-20261202/10":       "billed_without_label",
		"intent lr_0009":        "stuck_intent",
		"INV-20261202/11":       "matched",
		"INV-20261202/12":       "matched",
		"INV-20261202/13":       "matched",
		"INV-20261202/14":       "matched", "INV-20261202/15": "matched",
		"INV-20261202/16": "matched",
		"INV-20261202/17": "label_without_key",
		"INV-20261202/18": "amount_mismatch",
		"INV-20261202/19": "matched", "INV-20261202/20": "matched",
		"INV-20261202/21": "billed_without_label",
	}, byWhat(b.items(t, rep)))
	require.Equal(t, 21, rep.LinesRead)
	require.Equal(t, 21, rep.LinesNew)
	require.Equal(t, []string{"2026-12-02"}, rep.Period)
	require.Equal(t, 13, rep.Labels, "labels created on the day: not the one of the day before, nor the intents with none")
	require.Equal(t, 1, rep.LabelsInGrace)
	require.Equal(t, 1, rep.ExitCode())
	require.Equal(t, map[string]int64{"USD": 762 - 612, "EUR": 612}, rep.Amounts[reconcile.AmountMismatch],
		"the re-weigh is 150 cents; the line billed in EUR is at stake in EUR")

	// The run and its items are saved: a later Load reads the same report.
	loaded, err := reconcile.Load(b.ctx, b.pool, rep.RunID)
	require.NoError(t, err)
	require.Equal(t, rep.Counts, loaded.Counts)
	require.Equal(t, rep.Amounts, loaded.Amounts)
	require.Equal(t, rep.First, loaded.First)
	require.Equal(t, rep.StartedAt, loaded.StartedAt)
	require.Equal(t, rep.Grace, loaded.Grace)

	for _, f := range []struct {
		name  string
		write func(*reconcile.Report, *bytes.Buffer) error
	}{
		{"report.txt", func(r *reconcile.Report, w *bytes.Buffer) error { return r.WriteText(b.ctx, w) }},
		{"report.json", func(r *reconcile.Report, w *bytes.Buffer) error { return r.WriteJSON(b.ctx, w) }},
		{"report.csv", func(r *reconcile.Report, w *bytes.Buffer) error { return r.WriteCSV(b.ctx, w) }},
	} {
		var got, again bytes.Buffer
		require.NoError(t, f.write(rep, &got))
		require.NoError(t, f.write(loaded, &again))
		require.Equal(t, got.String(), again.String(), "%s of a loaded run", f.name)
		golden(t, f.name, got.Bytes())
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to write %s", path)
	require.Equal(t, string(want), string(got), "%s differs (go test -update rewrites it)", path)
}

// A file delivered twice changes nothing: no line is stored again, and the
// second run reports the same.
func TestReimport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	csv := everyCategory(t, b)
	first := b.run(t, csv)
	second := b.run(t, csv)
	require.Equal(t, 21, second.LinesRead)
	require.Zero(t, second.LinesNew)
	require.Equal(t, first.Counts, second.Counts)
	require.Equal(t, byWhat(b.items(t, first)), byWhat(b.items(t, second)))
	require.NotEqual(t, first.RunID, second.RunID)

	var stored int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM invoice_lines`).Scan(&stored))
	require.Equal(t, 21, stored)

	// A file with some lines seen and some new stores only the new ones.
	more := strings.TrimSuffix(csv, "\n") + "\nINV-20261202,22,2026-12-02T06:00:00Z,CL-F9003,GRD000777003-X,,,845,USD\n"
	third := b.run(t, more)
	require.Equal(t, 22, third.LinesRead)
	require.Equal(t, 1, third.LinesNew)
	require.Equal(t, first.Counts[reconcile.BilledWithoutLabel]+1, third.Counts[reconcile.BilledWithoutLabel])
}

// A line that comes back under the same (invoice_no, line_no) with other
// content is an error naming it, and nothing of that file is imported.
func TestReimportConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := seed{n: 1, createdAt: at("02:00:00")}
	insertSeeds(t, b.pool, []seed{s})
	b.run(t, invoice(s.line(1, at("02:00:01"))))

	changed := invoice(
		"INV-20261202,2,2026-12-02T02:00:05Z,CL-F1,GRD1-X,,,100,USD",
		strings.Replace(s.line(1, at("02:00:01")), ",612,", ",700,", 1))
	_, err := b.try(changed)
	var pe *reconcile.ParseError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 3, pe.Line)
	require.Contains(t, err.Error(), "invoice.csv:3: invoice INV-20261202 line 1 was imported before with other content")
	require.Contains(t, err.Error(), `cost_cents "612", now "700"`)

	var stored, runs int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM invoice_lines), (SELECT count(*) FROM reconcile_runs)`).Scan(&stored, &runs))
	require.Equal(t, 1, stored, "line 2 of the refused file is not imported")
	require.Equal(t, 1, runs)
}

// A file that repeats a line: the same content is one line, not a duplicate
// charge; other content is an error.
func TestRepeatedLineInFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := seed{n: 1, createdAt: at("02:00:00")}
	insertSeeds(t, b.pool, []seed{s})
	line := s.line(1, at("02:00:01"))

	rep := b.run(t, invoice(line, line))
	require.Equal(t, 2, rep.LinesRead)
	require.Equal(t, 1, rep.LinesNew)
	require.Equal(t, counts(reconcile.Matched, 1), rep.Counts)

	_, err := b.try(invoice("INV-20261203,1,2026-12-03T00:00:00Z,CL-F1,GRD1-X,,,100,USD", "INV-20261203,1,2026-12-03T00:00:00Z,CL-F1,GRD1-X,,,200,USD"))
	require.ErrorContains(t, err, "invoice.csv:3: invoice INV-20261203 line 1 appears again with other content (first on line 2)")
}

// Credits net against their charge.
func TestCredits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seeds := []seed{
		{n: 1, createdAt: at("01:00:00")}, // billed twice, the second refunded
		{n: 2, createdAt: at("01:10:00")}, // re-weighed up, then partly credited back to its cost
		{n: 3, createdAt: at("01:20:00")}, // refunded entirely: we paid nothing for a label we hold
		{n: 4, createdAt: at("01:30:00")}, // credited a different amount than charged twice
	}
	insertSeeds(t, b.pool, seeds)
	l := func(n, lineNo int, cost int64) string {
		return strings.Replace(seeds[n-1].line(lineNo, seeds[n-1].createdAt.Add(time.Duration(lineNo)*time.Second)), ",612,", fmt.Sprintf(",%d,", cost), 1)
	}
	rep := b.run(t, invoice(
		l(1, 1, 612), l(1, 2, 612), l(1, 3, -612),
		l(2, 4, 762), l(2, 5, -150),
		l(3, 6, 612), l(3, 7, -612),
		l(4, 8, 612), l(4, 9, 612), l(4, 10, -100),
		"INV-20261202,11,2026-12-02T03:00:00Z,CL-F1,GRD1-X,,,300,USD",
		"INV-20261202,12,2026-12-02T03:01:00Z,CL-F1,GRD1-X,,,-300,USD",
		"INV-20261202,13,2026-12-02T03:02:00Z,,,,,-45,USD",
	))
	require.Equal(t, map[string]string{
		"INV-20261202/1": "matched", "INV-20261202/2": "matched", "INV-20261202/3": "matched",
		"INV-20261202/4": "matched", "INV-20261202/5": "matched",
		"INV-20261202/6": "amount_mismatch", "INV-20261202/7": "amount_mismatch",
		"INV-20261202/8": "amount_mismatch", "INV-20261202/9": "duplicate_charge", "INV-20261202/10": "amount_mismatch",
		"INV-20261202/11": "matched", "INV-20261202/12": "matched",
		"INV-20261202/13": "billed_without_label",
	}, byWhat(b.items(t, rep)))
	// At stake: the refunded label billed 0 against 612, the second label
	// billed 612-100 against 612, the duplicate 612, the stray credit -45.
	require.Equal(t, map[string]int64{"USD": -612 - 100}, rep.Amounts[reconcile.AmountMismatch])
	require.Equal(t, map[string]int64{"USD": 612}, rep.Amounts[reconcile.DuplicateCharge])
	require.Equal(t, map[string]int64{"USD": -45}, rep.Amounts[reconcile.BilledWithoutLabel])
}

// The grace period hides young unbilled labels; --grace 0s reports them all.
func TestGrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	billed := seed{n: 1, createdAt: at("01:00:00")}
	old := seed{n: 2, createdAt: at("05:59:59")}
	young := seed{n: 3, createdAt: at("06:00:01")}
	youngNoKey := seed{n: 4, createdAt: at("07:00:00"), key: "started"} // the grace is about billing, not keys
	insertSeeds(t, b.pool, []seed{billed, old, young, youngNoKey})
	csv := invoice(billed.line(1, at("01:00:01")))

	rep := b.run(t, csv)
	require.Equal(t, map[string]string{"INV-20261202/1": "matched", "lbl_0002": "label_not_billed", "lbl_0004": "label_without_key"},
		byWhat(b.items(t, rep)))
	require.Equal(t, 1, rep.LabelsInGrace)

	rep = b.run(t, csv, func(o *reconcile.Opts) { o.Grace = 0 })
	require.Equal(t, map[string]string{"INV-20261202/1": "matched", "lbl_0002": "label_not_billed", "lbl_0003": "label_not_billed",
		"lbl_0004": "label_without_key"}, byWhat(b.items(t, rep)))
	require.Zero(t, rep.LabelsInGrace)
}

// Lines of neighbouring days count: a label bought before midnight and billed
// after it is billed, and a label billed again the next day is a duplicate.
func TestNeighbouringDays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	late := seed{n: 1, createdAt: at("23:59:58")}  // billed on the next day's invoice
	twice := seed{n: 2, createdAt: at("12:00:00")} // billed on both days
	insertSeeds(t, b.pool, []seed{late, twice})
	next := day.AddDate(0, 0, 1)
	opts := func(o *reconcile.Opts) { o.Grace = 0; o.NowFunc = func() time.Time { return next.AddDate(0, 0, 5) } }

	nextDay := b.run(t, invoice(
		late.line(1, next.Add(2*time.Second)),
		twice.line(2, next.Add(time.Hour)),
	), opts)
	require.Equal(t, []string{"2026-12-03"}, nextDay.Period)
	// Line 2 is the label's second charge, but its first is not imported yet.
	require.Equal(t, map[string]string{"INV-20261203/1": "matched", "INV-20261203/2": "matched"}, byWhat(b.items(t, nextDay)))

	thisDay := b.run(t, invoice(twice.line(1, at("12:00:01"))), opts)
	require.Equal(t, map[string]string{
		"INV-20261202/1": "matched", // the first charge of the label billed twice
		"lbl_0001":       "matched", // billed on the next day's invoice: not label_not_billed
	}, byWhat(b.items(t, thisDay)))
	var detail string
	require.NoError(t, thisDay.Items(b.ctx, func(it *reconcile.Item) error {
		if it.LabelID == "lbl_0001" {
			detail = it.Detail
		}
		return nil
	}))
	require.Equal(t, "billed on INV-20261203 line 1", detail)

	// Re-run the next day now that both are imported: the second charge is a duplicate.
	again := b.run(t, invoice(late.line(1, next.Add(2*time.Second)), twice.line(2, next.Add(time.Hour))), opts)
	require.Equal(t, map[string]string{"INV-20261203/1": "matched", "INV-20261203/2": "duplicate_charge"}, byWhat(b.items(t, again)))
}

// An invoice with no lines: with --date the day is still the period, and its
// labels are unbilled.
func TestEmptyInvoice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := seed{n: 1, createdAt: at("01:00:00")}
	insertSeeds(t, b.pool, []seed{s})

	rep := b.run(t, invoice())
	require.Empty(t, rep.Period)
	require.Zero(t, rep.ExitCode())

	rep = b.run(t, invoice(), func(o *reconcile.Opts) { o.Day = day })
	require.Equal(t, []string{"2026-12-02"}, rep.Period)
	require.Equal(t, counts(reconcile.LabelNotBilled, 1), rep.Counts)
	require.Equal(t, 1, rep.ExitCode())
}

// A key record saved in another JSON layout than the worker's is still read.
func TestKeyBodyLayout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := seed{n: 1, createdAt: at("01:00:00")}
	insertSeeds(t, b.pool, []seed{s})
	_, err := b.pool.Exec(b.ctx, `UPDATE idempotency_keys SET response_body = '{ "label_id" : "lbl_0001" }'`)
	require.NoError(t, err)
	rep := b.run(t, invoice(s.line(1, at("01:00:01"))))
	require.Equal(t, counts(reconcile.Matched, 1), rep.Counts)
}

func TestBadInvoice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.try(invoice("INV-1,1,2026-12-02T00:00:00Z,CL-1,GRD1,,lr_1,abc,USD"))
	var pe *reconcile.ParseError
	require.True(t, errors.As(err, &pe))
	require.Equal(t, "invoice.csv:2: cost_cents: want an integer number of cents, got \"abc\"", err.Error())
	var stored int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM invoice_lines`).Scan(&stored))
	require.Zero(t, stored)
}

// The less common ways through the matching: an invoice spanning two days
// (the labels' side is redone for the whole period), a line found by its
// carrier label id whose label a key already matched (a duplicate), a line
// found by its tracking number whose label is of the day before, and two
// labels under one carrier key (one line: the label with the smaller id
// takes it, the other is unbilled).
func TestMatchingEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	next := day.AddDate(0, 0, 1)
	a := seed{n: 1, createdAt: at("01:00:00")}
	dayBefore := seed{n: 2, createdAt: day.Add(-time.Hour)}
	late := seed{n: 3, createdAt: next.Add(time.Hour)} // a label of the second day
	twinA := seed{n: 4, createdAt: at("02:00:00")}
	twinB := seed{n: 5, createdAt: at("02:00:01")}
	insertSeeds(t, b.pool, []seed{a, dayBefore, late, twinA, twinB})
	// Make the twins share a carrier key, as a key reused after its purge would.
	_, err := b.pool.Exec(b.ctx, `UPDATE labels SET carrier_key = $1 WHERE label_id = 'lbl_0005'`, twinA.carrierKey())
	require.NoError(t, err)

	byCL := strings.Split(a.line(2, at("01:30:00")), ",")
	byCL[4], byCL[5], byCL[6] = "", "", "" // only the carrier label id: a second charge of label 1
	byTracking := strings.Split(dayBefore.line(3, at("00:10:00")), ",")
	byTracking[3], byTracking[5], byTracking[6] = "", "", ""
	rep := b.run(t, invoice(
		a.line(1, at("01:00:01")),
		strings.Join(byCL, ","),
		strings.Join(byTracking, ","),
		twinA.line(4, at("02:00:05")),
		late.line(1, next.Add(time.Hour+time.Second)),
	), func(o *reconcile.Opts) { o.Grace = 0 })

	require.Equal(t, []string{"2026-12-02", "2026-12-03"}, rep.Period)
	require.Equal(t, map[string]string{
		"INV-20261202/1": "matched",
		"INV-20261202/2": "duplicate_charge",
		"INV-20261202/3": "matched", // label of the day before: a line item
		"INV-20261202/4": "matched",
		"lbl_0005":       "label_not_billed",
		"INV-20261203/1": "matched",
	}, byWhat(b.items(t, rep)))
	require.Equal(t, 4, rep.Labels, "labels created on either day")
	items := b.items(t, rep)
	by := map[string]reconcile.Item{}
	for _, it := range items {
		by[fmt.Sprintf("%s/%d", it.InvoiceNo, it.LineNo)] = it
	}
	require.Equal(t, "carrier_label_id", by["INV-20261202/2"].MatchedBy)
	require.Equal(t, "lbl_0001", by["INV-20261202/2"].LabelID)
	require.Equal(t, "tracking_no", by["INV-20261202/3"].MatchedBy)
	require.Equal(t, reconcile.SubjectLine, by["INV-20261202/3"].Subject)
	require.Equal(t, "lbl_0004", by["INV-20261202/4"].LabelID)

	var scratch int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM reconcile_scratch_labels`).Scan(&scratch))
	require.Zero(t, scratch, "the scratch table is emptied by every run")
}

// StuckAfter decides which pending intents are stuck (operations.md
// --stuck-after): the same intent, pending since 01:00 two days before the
// run, is stuck under a threshold below its age and not under one above it.
func TestStuckAfter(t *testing.T) {
	t.Parallel()
	age := now.Sub(at("01:00:00"))
	for _, tc := range []struct {
		stuckAfter time.Duration
		stuck      int
	}{{age - time.Minute, 1}, {age + time.Minute, 0}} {
		b := setup(t)
		rep := b.run(t, everyCategory(t, b), func(o *reconcile.Opts) { o.StuckAfter = tc.stuckAfter })
		require.Equal(t, tc.stuck, rep.Counts[reconcile.StuckIntent], "stuck after %s", tc.stuckAfter)
		_, listed := byWhat(b.items(t, rep))["intent lr_0009"]
		require.Equal(t, tc.stuck == 1, listed)
	}
}
