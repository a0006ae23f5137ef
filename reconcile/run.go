package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of operations.md and of the window.
const (
	// DefaultGrace is how young an unbilled label may be and not be reported.
	DefaultGrace = 48 * time.Hour
	// DefaultStuckAfter is how long an intent may stay pending.
	DefaultStuckAfter = time.Hour
	// DefaultWindow is how far around the period lines and labels are looked
	// at: a carrier may bill a label the day after it was bought.
	DefaultWindow = 24 * time.Hour
	// DefaultFirstItems is how many items of each category the text report lists.
	DefaultFirstItems = 5
)

// advisoryLockKey serialises runs: two imports of one file at once would race
// on the same lines. Any constant shared by every run will do.
const advisoryLockKey = 7_210_442_918_274

// A run holds a few temporary tables and hash tables of a million rows each.
// These settings, for its transaction only (temp_buffers for its session),
// keep them in memory, and keep the planner on hash joins: no join of a run
// has an order worth merging on, and a merge join of a million unsorted rows
// sorts them on disk.
const sessionTempBuffers = "1GB"

var sessionSettings = []string{
	`SET LOCAL work_mem = '256MB'`,
	`SET LOCAL enable_mergejoin = off`,
	`SET LOCAL jit = off`,
}

// Opts is what one run reconciles, and how.
type Opts struct {
	// Invoice is the carrier's CSV (carrier.md). Required. An [io.ReadSeeker]
	// (a file, a bytes.Reader) is read in place; anything else is read into
	// memory first, because a file seen before is read twice. Either way no
	// line is read past the bounds of [BoundedInvoice].
	Invoice io.Reader
	// Source names the invoice in the report and in errors: the file name, or
	// "carrier:YYYY-MM-DD" for a fetched one.
	Source string
	// Day, when not zero, is the billing day the invoice was fetched for. It is
	// part of the period even if the carrier billed nothing that day.
	Day time.Time
	// Grace: a label younger than this when the run starts is not reported
	// label_not_billed. It is used as given: zero reports every unbilled label;
	// cmd/reconcile and the job use [DefaultGrace].
	Grace time.Duration
	// StuckAfter: an intent pending for longer than this when the run starts is
	// a stuck_intent. Used as given; cmd/reconcile uses [DefaultStuckAfter].
	StuckAfter time.Duration
	// Window: invoice lines billed and labels created this long before or after
	// the period are matched too, so that a label bought just before midnight
	// and billed after it is not reported unbilled, and a label billed again on
	// a neighbouring day is a duplicate. Zero means [DefaultWindow].
	Window time.Duration
	// FirstItems is how many items of each category [Report.First] holds;
	// zero means [DefaultFirstItems].
	FirstItems int
	// NowFunc is the clock; nil means the database's (the clock of the
	// labels' and intents' created_at): the run's start is its now(), and
	// the end that plus the time elapsed. The run's start and end come from
	// it, and so do the grace and stuck-after thresholds.
	NowFunc func() time.Time
	// ProgressFunc, when set, is told how the run goes; see [Progress].
	ProgressFunc func(Progress)
}

// Progress is how far a run is.
type Progress struct {
	// Phase is "read" while the invoice is read and stored, then "match"
	// (Step names the statement), then "done".
	Phase string
	Step  string
	// LinesRead is the number of invoice lines read so far.
	LinesRead int
	// LinesMatched is, once done, the number of the invoice's lines in category matched.
	LinesMatched int
}

func (o *Opts) now() time.Time {
	if o.NowFunc != nil {
		return o.NowFunc().UTC()
	}
	return time.Now().UTC()
}

// Run imports one invoice and reconciles its period, in one transaction: the
// new invoice lines, the run and its items commit together, or nothing does.
//
// Errors: a [*ParseError] for an invoice that cannot be read or that repeats a
// line with other content; otherwise a database error. Discrepancies are not
// errors: they are in the report ([Report.Discrepancies]).
func Run(ctx context.Context, pool *pgxpool.Pool, opts Opts) (*Report, error) {
	if opts.Invoice == nil {
		return nil, errors.New("reconcile: no invoice")
	}
	if opts.Grace < 0 || opts.StuckAfter < 0 || opts.Window < 0 {
		return nil, errors.New("reconcile: negative grace, stuck-after or window")
	}
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	if opts.FirstItems <= 0 {
		opts.FirstItems = DefaultFirstItems
	}
	source := opts.Source
	if source == "" {
		source = "invoice"
	}
	progress := func(p Progress) {
		if opts.ProgressFunc != nil {
			opts.ProgressFunc(p)
		}
	}
	started := opts.now()

	rep := &Report{
		Source:     source,
		StartedAt:  started,
		Grace:      opts.Grace,
		StuckAfter: opts.StuckAfter,
		Counts:     map[string]int{},
		Amounts:    map[string]map[string]int64{},
		db:         pool,
		firstItems: opts.FirstItems,
	}
	for _, c := range Categories {
		rep.Counts[c] = 0
	}

	// The run takes a connection of its own and closes it at the end: it
	// grows the session's temporary buffers, which a pooled session would keep.
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
	if opts.NowFunc == nil {
		began := time.Now()
		if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&started); err != nil {
			return nil, err
		}
		started = started.UTC()
		rep.StartedAt = started
		opts.NowFunc = func() time.Time { return started.Add(time.Since(began)) }
	}
	// Only possible before the session's first temporary table, which is the
	// case of a fresh connection; a session that had one keeps its setting.
	_, _ = conn.Exec(ctx, `SET temp_buffers = '`+sessionTempBuffers+`'`)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, set := range sessionSettings {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(advisoryLockKey)); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('reconcile_runs', 'run_id'))`).Scan(&rep.RunID); err != nil {
			return err
		}

		rs, err := readSeeker(opts.Invoice, source)
		if err != nil {
			return err
		}
		// The labels' side of the match does not depend on the invoice's lines:
		// start it on a second connection now, for the period the invoice's first
		// line announces, while this one imports the lines.
		var fill *scratchFill
		if guess := peekPeriod(rs, source, opts.Day); len(guess) > 0 {
			fill = startScratchFill(ctx, pool, newScope(rep, guess, opts, started, false))
		}
		defer fill.stop()

		progress(Progress{Phase: "read"})
		imp, err := importInvoice(ctx, tx, rs, source, rep.RunID, func(n int) {
			progress(Progress{Phase: "read", LinesRead: n})
		})
		if err != nil {
			return err
		}
		rep.LinesRead, rep.LinesNew = imp.read, imp.stored
		progress(Progress{Phase: "read", LinesRead: imp.read})

		days := imp.days
		if !opts.Day.IsZero() {
			y, m, d := opts.Day.Date()
			days = addDay(days, time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
		}
		for _, d := range days {
			rep.Period = append(rep.Period, d.Format(time.DateOnly))
		}

		var groups []counted
		if len(days) > 0 {
			s := newScope(rep, days, opts, started, imp.staged)
			s.repeatedKeys = imp.repeatedKeys
			progress(Progress{Phase: "match", Step: "labels and keys", LinesRead: imp.read})
			facts := func() (scratchFacts, error) {
				if f, err := fill.waitFacts(); err == nil {
					return f, nil
				}
				return scratchFactsOf(ctx, tx)
			}
			if !fill.waitFilled(s) {
				// The first line did not tell the period, or the other
				// connection failed: do it here.
				fill.stop()
				if err := fillScratch(ctx, tx, s); err != nil {
					return err
				}
				facts = func() (scratchFacts, error) { return scratchFactsOf(ctx, tx) }
			}
			groups, rep.Labels, rep.LabelsInGrace, err = match(ctx, tx, s, facts, func(step string) {
				progress(Progress{Phase: "match", Step: step, LinesRead: imp.read})
			})
			if err != nil {
				return err
			}
		}
		linesMatched := 0
		for _, g := range groups {
			rep.Counts[g.category] += g.n
			if g.currency != "" {
				if rep.Amounts[g.category] == nil {
					rep.Amounts[g.category] = map[string]int64{}
				}
				rep.Amounts[g.category][g.currency] += g.cents
			}
			if g.line && g.category == Matched {
				linesMatched += g.n
			}
		}
		rep.FinishedAt = opts.now()
		if err := saveRun(ctx, tx, rep); err != nil {
			return err
		}
		progress(Progress{Phase: "done", LinesRead: imp.read, LinesMatched: linesMatched})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := rep.loadFirst(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// newScope is what a run over days compares.
func newScope(rep *Report, days []time.Time, opts Opts, started time.Time, staged bool) scope {
	first, last := days[0], days[len(days)-1]
	return scope{
		runID:       rep.RunID,
		period:      periodRange(days),
		lo:          first.Add(-opts.Window),
		hi:          last.AddDate(0, 0, 1).Add(opts.Window),
		graceBefore: started.Add(-opts.Grace),
		stuckBefore: started.Add(-opts.StuckAfter),
		staged:      staged,
	}
}

// readSeeker returns the invoice as something that can be read twice. What
// is read into memory is read within the bounds of [BoundedInvoice]: a line
// over them ends the reading there.
func readSeeker(r io.Reader, source string) (io.ReadSeeker, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		return rs, nil
	}
	b, err := io.ReadAll(BoundedInvoice(r, source))
	var pe *ParseError
	if errors.As(err, &pe) {
		return nil, pe
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return bytes.NewReader(b), nil
}

// peekPeriod guesses the period from the invoice's first line (and the day
// it was fetched for), and puts the reader back where it was. Most invoices
// bill one day; when the guess is wrong, the labels' side is redone.
func peekPeriod(rs io.ReadSeeker, source string, day time.Time) []time.Time {
	var days []time.Time
	if !day.IsZero() {
		y, m, d := day.Date()
		days = append(days, time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
	}
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return days
	}
	defer rs.Seek(start, io.SeekStart) //nolint:errcheck // importInvoice seeks again
	lr, err := newLineReader(rs, source)
	if err != nil {
		return days
	}
	var l Line
	if err := lr.next(&l); err != nil {
		return days
	}
	return addDay(days, l.BilledAt.Truncate(24*time.Hour))
}

func addDay(days []time.Time, day time.Time) []time.Time {
	for i, d := range days {
		if d.Equal(day) {
			return days
		}
		if d.After(day) {
			return append(days[:i:i], append([]time.Time{day}, days[i:]...)...)
		}
	}
	return append(days, day)
}

func saveRun(ctx context.Context, tx pgx.Tx, r *Report) error {
	counts, err := json.Marshal(r.Counts)
	if err != nil {
		return err
	}
	amounts, err := json.Marshal(r.Amounts)
	if err != nil {
		return err
	}
	period := r.Period
	if period == nil {
		period = []string{}
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO reconcile_runs (run_id, started_at, finished_at, source, period, grace, stuck_after,
		                            lines_read, lines_new, labels, labels_in_grace, counts, amounts)
		VALUES ($1, $2, $3, $4, $5::date[], make_interval(secs => $6), make_interval(secs => $7),
		        $8, $9, $10, $11, $12, $13)`,
		r.RunID, r.StartedAt, r.FinishedAt, r.Source, period, r.Grace.Seconds(), r.StuckAfter.Seconds(),
		r.LinesRead, r.LinesNew, r.Labels, r.LabelsInGrace, counts, amounts)
	if err != nil {
		return fmt.Errorf("save run: %w", err)
	}
	return nil
}
