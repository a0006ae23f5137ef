package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/reconcile"
)

// ReconcileArgs asks for the reconciliation of one UTC billing day, fetched
// from the carrier. Jobs are unique by day while one is queued or running, so
// a day is never reconciled twice at once.
type ReconcileArgs struct {
	// Day is the billing day, YYYY-MM-DD (UTC). Empty means the day before the
	// one the job runs on.
	Day string `json:"day,omitempty" river:"unique"`
}

// Kind implements river.JobArgs.
func (ReconcileArgs) Kind() string { return "reconcile" }

// InsertOpts implements river.JobArgsWithInsertOpts. Ten attempts with River's
// backoff keep retrying an unreachable carrier or database for about four hours.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 10, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}}
}

// ReconcilePeriodicArgs is the constructor of the periodic job: each time the
// schedule fires it names the previous UTC day, so a job that runs late (after
// a retry, after midnight) still reconciles the day it was meant for. nowFunc
// nil means time.Now.
//
//	river.NewPeriodicJob(schedule, jobs.ReconcilePeriodicArgs(nil), &river.PeriodicJobOpts{RunOnStart: false})
func ReconcilePeriodicArgs(nowFunc func() time.Time) river.PeriodicJobConstructor {
	return ReconcilePeriodicArgsDaysBack(1, nowFunc)
}

// ReconcilePeriodicArgsDaysBack names the UTC day daysBack days before the
// tick instead. A second periodic job with 3 reconciles, once the default
// 48h grace has passed, the labels a run of yesterday still saw as possibly
// not billed yet (docs/reconcile.md, "Late billing").
func ReconcilePeriodicArgsDaysBack(daysBack int, nowFunc func() time.Time) river.PeriodicJobConstructor {
	if nowFunc == nil {
		nowFunc = time.Now
	}
	return func() (river.JobArgs, *river.InsertOpts) {
		return ReconcileArgs{Day: nowFunc().UTC().AddDate(0, 0, -daysBack).Format(time.DateOnly)}, nil
	}
}

// ReconcileInvoicer fetches a day's invoice; *carrier.Client is one.
type ReconcileInvoicer interface {
	Invoice(ctx context.Context, day time.Time) ([]byte, error)
}

// ReconcileWorker fetches a day's invoice from the carrier and reconciles it
// with [reconcile.Run], which saves the run and its items. Discrepancies do not
// fail the job: they are in the saved run, in the log (warn) and, through
// ReportFunc, in the metrics. An unreachable carrier or database fails the
// attempt and River retries it; an invoice that cannot be read is cancelled,
// since reading it again will not help.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	Pool    *pgxpool.Pool
	Carrier ReconcileInvoicer
	// Grace and StuckAfter are reconcile's --grace and --stuck-after; zero
	// means reconcile.DefaultGrace and reconcile.DefaultStuckAfter.
	Grace      time.Duration
	StuckAfter time.Duration
	Log        zerolog.Logger
	// NowFunc is the clock; nil means time.Now.
	NowFunc func() time.Time
	// ReportFunc, when set, is called with every saved run (to export
	// Report.Counts as metrics, say).
	ReportFunc func(*reconcile.Report)
}

// Timeout bounds one attempt: a million-line invoice takes well under a minute.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return 30 * time.Minute }

// Work implements river.Worker.
func (w *ReconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	now := time.Now
	if w.NowFunc != nil {
		now = w.NowFunc
	}
	dayStr := job.Args.Day
	if dayStr == "" {
		dayStr = now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	}
	day, err := time.Parse(time.DateOnly, dayStr)
	if err != nil {
		return river.JobCancel(fmt.Errorf("reconcile: day %q: want YYYY-MM-DD", dayStr))
	}
	log := jobLogger(ctx, w.Log, job.JobRow).With().Str("day", dayStr).Logger()

	csv, err := w.Carrier.Invoice(ctx, day)
	if err != nil {
		log.Warn().Err(err).Msg("reconcile: cannot fetch the invoice")
		return fmt.Errorf("reconcile: fetching the invoice of %s: %w", dayStr, err)
	}
	grace, stuck := w.Grace, w.StuckAfter
	if grace == 0 {
		grace = reconcile.DefaultGrace
	}
	if stuck == 0 {
		stuck = reconcile.DefaultStuckAfter
	}
	started := now()
	rep, err := reconcile.Run(ctx, w.Pool, reconcile.Opts{
		Invoice:    bytes.NewReader(csv),
		Source:     "carrier:" + dayStr,
		Day:        day,
		Grace:      grace,
		StuckAfter: stuck,
		NowFunc:    w.NowFunc,
	})
	var pe *reconcile.ParseError
	switch {
	case errors.As(err, &pe):
		log.Error().Err(err).Msg("reconcile: the carrier's invoice cannot be imported")
		return river.JobCancel(err)
	case err != nil:
		return fmt.Errorf("reconcile %s: %w", dayStr, err)
	}
	ev := log.Info()
	if rep.Discrepancies() > 0 {
		ev = log.Warn()
	}
	counts := zerolog.Dict()
	for _, c := range reconcile.Categories {
		counts.Int(c, rep.Counts[c])
	}
	ev.Int64("run_id", rep.RunID).Int("lines", rep.LinesRead).Int("lines_new", rep.LinesNew).
		Int("discrepancies", rep.Discrepancies()).Dict("counts", counts).
		Dur("duration_ms", now().Sub(started)).Msg("reconcile run saved")
	if w.ReportFunc != nil {
		w.ReportFunc(rep)
	}
	return nil
}

// ReconcileSchedule parses RECONCILE_SCHEDULE: "daily@HH:MM" runs once a day
// at that UTC time; a Go duration of at least a minute ("6h") runs at that
// interval from the worker's start. River runs periodic jobs on its elected
// leader only, so a fleet reconciles once per tick.
func ReconcileSchedule(spec string) (river.PeriodicSchedule, error) {
	bad := fmt.Errorf("reconcile schedule %q: want daily@HH:MM (UTC) or a duration like 6h", spec)
	if at, ok := strings.CutPrefix(spec, "daily@"); ok {
		hh, mm, ok := strings.Cut(at, ":")
		h, herr := strconv.Atoi(hh)
		m, merr := strconv.Atoi(mm)
		if !ok || len(hh) != 2 || len(mm) != 2 || herr != nil || merr != nil || h < 0 || h > 23 || m < 0 || m > 59 {
			return nil, bad
		}
		return dailySchedule{offset: time.Duration(h)*time.Hour + time.Duration(m)*time.Minute}, nil
	}
	d, err := time.ParseDuration(spec)
	if err != nil {
		return nil, bad
	}
	if d < time.Minute {
		return nil, fmt.Errorf("reconcile schedule %q: an interval must be at least 1m", spec)
	}
	return river.PeriodicInterval(d), nil
}

// dailySchedule fires once a day, offset after UTC midnight.
type dailySchedule struct{ offset time.Duration }

// Next implements river.PeriodicSchedule: the first firing strictly after t.
func (s dailySchedule) Next(t time.Time) time.Time {
	t = t.UTC()
	next := t.Truncate(24 * time.Hour).Add(s.offset)
	if !next.After(t) {
		next = next.AddDate(0, 0, 1)
	}
	return next
}
