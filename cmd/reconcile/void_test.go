package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/reconcile"
)

func TestVoidHelp(t *testing.T) {
	t.Parallel()
	requireHelp(t, "Usage: reconcile void --run RUN_ID", "void", "--help")
	require.Contains(t, runCmd(nil, "--help").stdout, "reconcile void --run RUN_ID")
}

func TestVoidBadConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range []refusal{
		{nil, nil, "give --run RUN_ID"},
		{[]string{"--run", "x"}, nil, `invalid --run "x"`},
		{[]string{"--run", "0"}, nil, `invalid --run "0"`},
		{[]string{"--run", "1", "--category", "amount_mismatch"}, nil, `invalid --category "amount_mismatch"`},
		{[]string{"--run", "1", "--format", "xml"}, nil, `invalid --format "xml"`},
		{[]string{"--run", "1", "--wait", "-1s"}, nil, "must not be negative"},
		{[]string{"--run", "1", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"--run", "1", "--invoice", "a.csv"}, nil, "flag provided but not defined: -invoice"},
		{[]string{"--run", "1"}, map[string]string{"LOG_LEVEL": "loud"}, `invalid LOG_LEVEL "loud"`},
		{[]string{"--run", "1"}, map[string]string{"DATABASE_URL": "postgres://h:notaport/db"}, "invalid DATABASE_URL"},
	} {
		requireRefused(t, "reconcile void", tc.env, append([]string{"void"}, tc.args...), tc.want)
	}
}

// voidReport is the JSON of `reconcile void --format json`.
type voidReport struct {
	RunID      int64          `json:"run_id"`
	Category   string         `json:"category"`
	DryRun     bool           `json:"dry_run"`
	Targets    int            `json:"targets"`
	ExitStatus int            `json:"exit_status"`
	Counts     map[string]int `json:"counts"`
	Recovered  map[string]int `json:"recovered"`
	Items      []struct {
		InvoiceNo      string  `json:"invoice_no"`
		LineNo         int     `json:"line_no"`
		LabelID        *string `json:"label_id"`
		CarrierLabelID string  `json:"carrier_label_id"`
		Reference      string  `json:"reference"`
		AmountCents    int64   `json:"amount_cents"`
		Outcome        string  `json:"outcome"`
		VoidedAt       *string `json:"voided_at"`
		Detail         *string `json:"detail"`
	} `json:"items"`
}

// reconcileStack reconciles the stack's invoice through the command, and
// returns the run id it printed.
func reconcileStack(t *testing.T, s *stacktest.SimStack, env map[string]string) (int64, result) {
	t.Helper()
	_, inv := s.Invoice()
	path := filepath.Join(t.TempDir(), "invoice.csv")
	require.NoError(t, os.WriteFile(path, inv, 0o644))
	r := runCmd(env, "--invoice", path, "--format", "json")
	require.Contains(t, []int{0, 1}, r.code, r.stderr)
	var doc struct {
		RunID int64 `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), r.stdout)
	return doc.RunID, r
}

// The whole path through the command: reconcile finds the duplicate bought
// from a carrier without keys, --dry-run plans its void and changes nothing,
// void voids it through the workers (exit 0), a rerun changes nothing, and
// the next reconcile shows the charge voided and exits 0.
func TestVoidCommand(t *testing.T) {
	t.Parallel()
	s, label := stacktest.NewDuplicate(t, stacktest.SimOpts{})
	env := map[string]string{"DATABASE_URL": s.Pool.Config().ConnString(), "LOG_LEVEL": "warn"}
	runID, r := reconcileStack(t, s, env)
	require.Equal(t, 1, r.code, "a duplicate: %s", r.stdout)

	dry := runCmd(env, "void", "--run", strconv.FormatInt(runID, 10), "--dry-run", "--format", "json")
	require.Equal(t, 0, dry.code, dry.stderr)
	var plan voidReport
	require.NoError(t, json.Unmarshal([]byte(dry.stdout), &plan), dry.stdout)
	require.True(t, plan.DryRun)
	require.Equal(t, reconcile.DuplicateCharge, plan.Category)
	require.Equal(t, 1, plan.Targets)
	require.Len(t, plan.Items, 1)
	dup := plan.Items[0]
	require.Equal(t, reconcile.VoidWouldVoid, dup.Outcome)
	require.NotEqual(t, label.CarrierLabelID, dup.CarrierLabelID, "never the label we hold")
	require.Equal(t, label.LabelID, *dup.LabelID)
	require.Zero(t, s.Count(`SELECT count(*) FROM reconcile_voids`), "a dry run writes nothing")
	require.Zero(t, s.Count(`SELECT count(*) FROM river_job WHERE kind = 'void_label'`))
	require.Zero(t, s.Sim.Stats().Voids)

	v := runCmd(env, "void", "--run", strconv.FormatInt(runID, 10))
	require.Equal(t, 0, v.code, "stdout:\n%s\nstderr:\n%s", v.stdout, v.stderr)
	require.True(t, strings.HasPrefix(v.stdout, "reconcile void, run "+strconv.FormatInt(runID, 10)+": "), v.stdout)
	require.Contains(t, v.stdout, "outcomes 1 voided\n")
	require.Contains(t, v.stdout, "recovered USD 5.95\n")
	require.Contains(t, v.stdout, dup.CarrierLabelID)
	require.Contains(t, v.stdout, "every targeted label is voided: exit status 0")
	require.Equal(t, int64(1), s.Sim.Stats().Voids)

	again := runCmd(env, "void", "--run", strconv.FormatInt(runID, 10), "--format", "csv")
	require.Equal(t, 0, again.code, again.stderr)
	rows, err := csv.NewReader(strings.NewReader(again.stdout)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, reconcile.VoidCSVHeader, rows[0])
	require.Equal(t, "voided", rows[1][14])
	require.Equal(t, int64(1), s.Sim.Stats().Voids, "voided once")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM river_job WHERE kind = 'void_label'`))

	_, next := reconcileStack(t, s, env)
	require.Equal(t, 0, next.code, "the duplicate is voided, nothing else is wrong: %s", next.stdout)
	var doc struct {
		Counts map[string]int `json:"counts"`
	}
	require.NoError(t, json.Unmarshal([]byte(next.stdout), &doc))
	require.Equal(t, map[string]int{"matched": 1, "billed_without_label": 0, "duplicate_charge": 0, "amount_mismatch": 0,
		"label_not_billed": 0, "key_without_label": 0, "label_without_key": 0, "stuck_intent": 0, "carrier_id_conflict": 0, "voided": 2}, doc.Counts)

	missing := runCmd(env, "void", "--run", "999999")
	require.Equal(t, 2, missing.code)
	require.Contains(t, missing.stderr, "no run 999999 is saved")
}

// Past the carrier's window the void is refused: the item says
// window_closed and the command exits 1.
func TestVoidCommandPastTheWindow(t *testing.T) {
	t.Parallel()
	s, _ := stacktest.NewDuplicate(t, stacktest.SimOpts{})
	env := map[string]string{"DATABASE_URL": s.Pool.Config().ConnString(), "LOG_LEVEL": "warn"}
	runID, _ := reconcileStack(t, s, env)
	s.Sim.Advance(sim.DefaultVoidWindow + time.Minute)

	out := filepath.Join(t.TempDir(), "void.json")
	r := runCmd(env, "void", "--run", strconv.FormatInt(runID, 10), "--format", "json", "--out", out)
	require.Equal(t, 1, r.code, r.stderr)
	require.Empty(t, r.stdout)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep voidReport
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, 1, rep.ExitStatus)
	require.Equal(t, 1, rep.Counts[reconcile.VoidWindowClosed])
	require.Equal(t, reconcile.VoidWindowClosed, rep.Items[0].Outcome)
	require.Nil(t, rep.Items[0].VoidedAt)
	require.Empty(t, rep.Recovered)
	require.Zero(t, s.Sim.Stats().Voids)
}

// With --wait 0s the command does not wait: a void not answered yet is
// pending, and the exit status says it is not done; a rerun once the
// worker has recorded it shows it voided.
func TestVoidCommandDoesNotWaitPastWait(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s, _ := stacktest.NewDuplicate(t, stacktest.SimOpts{AfterVoidFunc: func(ctx context.Context, _ string) error {
		select { // the worker holds the carrier's answer until the test lets it go
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	env := map[string]string{"DATABASE_URL": s.Pool.Config().ConnString(), "LOG_LEVEL": "warn"}
	runID, _ := reconcileStack(t, s, env)

	r := runCmd(env, "void", "--run", strconv.FormatInt(runID, 10), "--wait", "0s")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, "outcomes 1 pending\n")
	require.Contains(t, r.stdout, "some labels are not voided: exit status 1")

	free()
	again := runCmd(env, "void", "--run", strconv.FormatInt(runID, 10))
	require.Equal(t, 0, again.code, again.stdout)
	require.Contains(t, again.stdout, "outcomes 1 voided\n")
	require.Equal(t, int64(1), s.Sim.Stats().Voids)
}
