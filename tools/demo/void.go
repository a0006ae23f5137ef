package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/proc"
)

// duplicate turns the simulator into a carrier that ignores keys and drops
// its next reply, and asks for the order's second parcel: the worker's
// retry, under the same carrier key, buys the label a second time.
func (d *demo) duplicate(ctx context.Context) error {
	d.say.Step("A carrier that ignores keys loses a reply: the worker's retry buys parcel 2 twice")
	seed, ok := sim.SeedDroppingFirstReply(0.5)
	if !ok {
		return errors.New("no simulator seed drops the first reply only")
	}
	conf := fmt.Sprintf(`{"no_keys": true, "drop_reply_rate": 0.5, "seed": %d}`, seed)
	d.say.Say("$ POST %s/sim/config %s   (seed %d drops the next reply, not the one after)", d.carrierURL, conf, seed)
	if err := d.carrierPost(ctx, "/sim/config", conf); err != nil {
		return err
	}
	// The order's second parcel, asked for through the client package: it
	// sends the derived key and waits for the outcome.
	var parcel client.Parcel
	if err := json.Unmarshal(labelBody(seedWeight), &parcel); err != nil {
		return err
	}
	parcel.ParcelNo = 2
	d.say.Say("$ client.CreateLabel(ctx, parcel 2 of order 918273)   (Idempotency-Key %s, waits until final)", client.DeriveKey(parcel))
	wctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	label, err := client.New(d.apiURL, d.token).CreateLabel(wctx, parcel)
	if err != nil {
		return fmt.Errorf("parcel 2: %w", err)
	}
	d.dupLabelID, d.dupKept = label.LabelID, label.CarrierLabelID
	d.say.Say("succeeded: label %s, carrier label %s", label.LabelID, label.CarrierLabelID)
	stats, err := d.carrierStats(ctx, false)
	if err != nil {
		return err
	}
	if stats.Purchases != 3 || stats.Dropped != 1 {
		return fmt.Errorf("the carrier sold %d labels with %d replies dropped, want 3 and 1", stats.Purchases, stats.Dropped)
	}
	d.say.Say("The carrier sold 3 labels: the seed's, and parcel 2 twice (its first reply was dropped). We hold one of the two.")
	d.say.Say("$ POST %s/sim/config {\"no_keys\": false, \"drop_reply_rate\": 0}   (a well-behaved carrier again)", d.carrierURL)
	return d.carrierPost(ctx, "/sim/config", `{"no_keys": false, "drop_reply_rate": 0}`)
}

// findDuplicate reconciles today's invoice again: the second purchase of
// parcel 2 is a duplicate_charge.
func (d *demo) findDuplicate(ctx context.Context) error {
	d.say.Step("Reconcile again: the second purchase is found")
	res, err := d.reconcileDay(ctx)
	if err != nil {
		return err
	}
	if res.ExitCode != 1 || !strings.Contains(res.Stdout, "duplicate_charge: first 1 of 1") {
		return fmt.Errorf("reconcile exit %d, want 1 with one duplicate_charge:\n%s", res.ExitCode, res.Stdout)
	}
	first, _, _ := strings.Cut(res.Stdout, "\n")
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.Fields(first + " x x")[2], ":"), 10, 64)
	if err != nil {
		return fmt.Errorf("no run id on the report's first line %q", first)
	}
	d.runID = n
	d.say.Say("exit 1: a duplicate charge, under run %d.", n)
	return nil
}

// voidDuplicate voids it: a dry run first, then for real through the worker.
func (d *demo) voidDuplicate(ctx context.Context) error {
	d.say.Step("Void the duplicate at the carrier (a River job in the worker), the label we hold untouched")
	run := strconv.FormatInt(d.runID, 10)
	dry, err := d.reconcileRun(ctx, "void", "--run", run, "--dry-run")
	if err != nil {
		return err
	}
	if dry.ExitCode != 0 || !strings.Contains(dry.Stdout, "would_void") {
		return fmt.Errorf("void --dry-run exit %d, want 0 with would_void:\n%s", dry.ExitCode, dry.Stdout)
	}
	res, err := d.reconcileRun(ctx, "void", "--run", run)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "outcomes 1 voided") || strings.Contains(res.Stdout, " "+d.dupKept+" ") {
		return fmt.Errorf("void exit %d, want 0 with the other carrier label voided:\n%s", res.ExitCode, res.Stdout)
	}
	stats, err := d.carrierStats(ctx, false)
	if err != nil {
		return err
	}
	if stats.Voids != 1 {
		return fmt.Errorf("the carrier voided %d labels, want 1", stats.Voids)
	}
	d.say.Say("exit 0: voided once (GET /sim/stats: \"voids\": %d); carrier label %s, which label %s holds, was not touched.",
		stats.Voids, d.dupKept, d.dupLabelID)
	return nil
}

// afterVoid reconciles once more: the duplicate and its credit net out.
func (d *demo) afterVoid(ctx context.Context) error {
	d.say.Step("Reconcile after the void: the credit nets against the duplicate")
	res, err := d.reconcileDay(ctx)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "\nvoided ") {
		return fmt.Errorf("reconcile exit %d, want 0 with the duplicate voided:\n%s", res.ExitCode, res.Stdout)
	}
	d.voided = true
	d.say.Say("exit 0: the duplicate and its credit line are voided; nothing is left to act on.")
	return nil
}

// reconcileRun runs reconcile with args, shows the command and its output,
// and returns the result; an exit status of 1 is a finding, not an error.
func (d *demo) reconcileRun(ctx context.Context, args ...string) (*proc.Result, error) {
	d.say.Say("$ reconcile %s", strings.Join(args, " "))
	ctx, cancel := context.WithTimeout(ctx, startTimeout+2*time.Minute)
	defer cancel()
	res, err := d.fleet.Command(ctx, "reconcile", map[string]string{"DATABASE_URL": d.dbURL, "CARRIER_URL": d.carrierURL}, args...)
	if res == nil || (err != nil && res.ExitCode != 1) {
		if res != nil {
			return nil, fmt.Errorf("%w\n%s%s", err, res.Stdout, res.Stderr)
		}
		return nil, err
	}
	d.say.Block(res.Stdout)
	d.say.line("")
	return res, nil
}

// reconcileDay reconciles the labels' day.
func (d *demo) reconcileDay(ctx context.Context) (*proc.Result, error) {
	return d.reconcileRun(ctx, "--date", d.day(), "--format", "text", "--grace", "0s")
}

// day is the UTC day of the labels (the first one's, which poll learnt),
// as reconcile --date takes it.
func (d *demo) day() string { return d.label.CreatedAt.UTC().Format(time.DateOnly) }

// carrierStats reads GET /sim/stats, shown as request and answer when show.
func (d *demo) carrierStats(ctx context.Context, show bool) (sim.Stats, error) {
	var st sim.Stats
	r, err := d.carrier(ctx, http.MethodGet, "/sim/stats", "")
	if err != nil {
		return st, err
	}
	if show {
		d.say.Request(http.MethodGet, "/sim/stats", nil, nil)
		d.say.Response(r)
	}
	if r.code != http.StatusOK || json.Unmarshal(r.body, &st) != nil {
		return st, fmt.Errorf("GET /sim/stats: %s", r)
	}
	return st, nil
}

func (d *demo) carrierPost(ctx context.Context, path, body string) error {
	r, err := d.carrier(ctx, http.MethodPost, path, body)
	if err == nil && r.code != http.StatusOK {
		err = fmt.Errorf("POST %s: %s: %s", path, r, r.body)
	}
	return err
}

// carrier sends a request to the simulator.
func (d *demo) carrier(ctx context.Context, method, path, body string) (*response, error) {
	return d.send(ctx, method, d.carrierURL+path, []header{{"Content-Type", "application/json"}}, []byte(body))
}
