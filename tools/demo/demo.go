package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/cli"
	"github.com/labelkit/labels/internal/devdb"
	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/proc"
)

// The seed's example: a label for parcel 1 of order 918273.
const (
	callerName     = "fulfilment"
	idempotencyKey = "label:918273:1:v1"
	seedWeight     = 1450
	changedWeight  = 1500
)

// labelBody is the request body, as api.md shows it, with weight_g set.
func labelBody(weightG int) []byte {
	return fmt.Appendf(nil, `{
  "order_id": 918273,
  "parcel_no": 1,
  "weight_g": %d,
  "service": "ground",
  "label_version": 1,
  "ship_to": {
    "name": "A. Example",
    "line1": "1 Example Street",
    "line2": "",
    "city": "Exampleton",
    "postal_code": "10115",
    "country": "DE"
  }
}`, weightG)
}

const (
	// startTimeout bounds each process's start, and each one-shot command.
	startTimeout = 60 * time.Second
	// pollTimeout bounds the wait for the label request's outcome.
	pollTimeout = 60 * time.Second
	// stopTimeout is what a process gets after SIGTERM before SIGKILL: above
	// the worker's longest graceful stop (CARRIER_TIMEOUT + LEASE_DURATION).
	stopTimeout = 60 * time.Second
)

// demo is one run: what it started, and what it learnt on the way.
type demo struct {
	cfg    Config
	say    *narrator
	stderr io.Writer
	http   *http.Client

	bins  *proc.Binaries
	fleet *fleet.Fleet

	dbURL      string
	carrierURL string
	apiURL     string
	token      string
	requestID  string
	labelJSON  json.RawMessage // the Label of the succeeded request, as sent
	label      labels.Label    // and as read
	purchases  int
	reconciled string // the reconcile verdict for the summary

	dupLabelID string // parcel 2's label, and the carrier label it holds
	dupKept    string
	runID      int64 // the reconcile run that found the duplicate
	voided     bool

	hooks  *receiver // the caller's webhook endpoint
	secret string    // its signing secret, as api webhook set printed it
}

func newDemo(cfg Config, stdout, stderr io.Writer) *demo {
	return &demo{
		cfg:    cfg,
		say:    &narrator{w: stdout},
		stderr: stderr,
		http:   &http.Client{Timeout: 40 * time.Second},
	}
}

func (d *demo) run(ctx context.Context) error {
	d.say.line("Label service demo: a label for parcel 1 of order 918273 (%d g, ground), asked for three times, bought once.", seedWeight)
	for _, step := range []func(context.Context) error{
		d.binaries,
		d.database,
		d.start,
		d.addCaller,
		d.setWebhook,
		d.create,
		d.poll,
		d.webhook,
		d.document,
		d.replay,
		d.reuse,
		d.carrierView,
		d.reconcile,
		d.duplicate,
		d.findDuplicate,
		d.voidDuplicate,
		d.afterVoid,
	} {
		if err := step(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
	return nil
}

// database drops and creates the demo's database and applies the migrations.
func (d *demo) database(ctx context.Context) error {
	d.say.Step("Database")
	server, err := devdb.Ensure(ctx, devdb.Options{URL: d.cfg.ServerURL, Log: func(format string, args ...any) {
		d.say.Say("%s", strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " "))
	}})
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	// Dropped with whatever is still connected to it (a demo interrupted earlier).
	if err := devdb.DropScratch(ctx, server, d.cfg.Database, "labels_demo"); err != nil {
		return fmt.Errorf("dropping database %s: %w", d.cfg.Database, err)
	}
	if d.dbURL, err = devdb.EnsureDatabase(ctx, server, d.cfg.Database); err != nil {
		return fmt.Errorf("creating database %s: %w", d.cfg.Database, err)
	}
	d.say.Say("server    %s", cli.Redact(server))
	d.say.Say("database  %s (dropped and created afresh, so the run starts clean)", d.cfg.Database)
	d.say.Say("$ api migrate")
	res, err := d.command(ctx, "api", "migrate")
	if err != nil {
		return err
	}
	d.say.Block(res.Stdout)
	return nil
}

// binaries builds ./cmd/... once, unless --bin names prebuilt ones, and
// makes the fleet that runs them.
func (d *demo) binaries(ctx context.Context) error {
	d.say.Step("Binaries")
	began := time.Now()
	b, err := fleet.Binaries(ctx, d.cfg.BinDir, "", func(string, ...any) {}, "./cmd/api", "./cmd/worker", "./cmd/carrier", "./cmd/reconcile")
	if err != nil {
		return fmt.Errorf("the binaries: %w", err)
	}
	d.bins = b
	if d.cfg.BinDir != "" {
		d.say.Say("prebuilt in %s (--bin)", d.cfg.BinDir)
	} else {
		d.say.Say("$ go build -o %s/ ./cmd/api ./cmd/worker ./cmd/carrier ./cmd/reconcile   (%.1fs)", b.Dir, time.Since(began).Seconds())
	}
	// The environment every binary of the demo gets: proc passes nothing
	// else of the demo's own environment that could configure them.
	cfg := fleet.Config{Bins: b, Grace: stopTimeout, StartTimeout: startTimeout,
		Env: map[string]string{"LOG_FORMAT": "json", "LOG_LEVEL": "info"}}
	maps.Copy(cfg.Env, webhookEnv)
	if d.cfg.Verbose {
		cfg.OnLine = func(name string, l proc.Line) { fmt.Fprintf(d.stderr, "[%s] %s\n", name, l.Text) }
	}
	d.fleet = fleet.New(cfg)
	return nil
}

// command runs a one-shot command (api migrate, api caller add) to its end.
func (d *demo) command(ctx context.Context, name string, args ...string) (*proc.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return d.fleet.Command(ctx, name, map[string]string{"DATABASE_URL": d.dbURL}, args...)
}

// start starts the carrier simulator, the API and a worker, each on a free
// port, and waits until each answers GET /healthz.
func (d *demo) start(ctx context.Context) error {
	d.say.Step("Processes")
	db := map[string]string{"DATABASE_URL": d.dbURL}
	carrier, err := d.fleet.Start(ctx, fleet.Spec{Bin: "carrier", Env: db})
	if err != nil {
		return err
	}
	d.carrierURL = carrier.URL()
	d.say.Say("carrier   %s   the simulator: in memory, well-behaved, with keys", d.carrierURL)

	api, err := d.fleet.Start(ctx, fleet.Spec{Bin: "api", Env: db})
	if err != nil {
		return err
	}
	d.apiURL = api.URL()
	d.say.Say("api       %s", d.apiURL)

	worker, err := d.fleet.Start(ctx, fleet.Spec{Bin: "worker", Env: db})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if _, err := worker.WaitMsg(wctx, "worker started"); err != nil {
		return err
	}
	d.say.Say("worker    %s/metrics   relay + River workers, buying from the carrier above", worker.URL())
	return nil
}

// addCaller creates the caller the requests are sent as.
func (d *demo) addCaller(ctx context.Context) error {
	d.say.Step("Caller")
	d.say.Say("$ api caller add %s", callerName)
	res, err := d.command(ctx, "api", "caller", "add", callerName)
	if err != nil {
		return err
	}
	d.token = res.LastLine()
	if d.token == "" {
		return fmt.Errorf("api caller add printed no token:\n%s", res.Stdout)
	}
	d.say.Block(strings.Replace(res.Stdout, d.token, mask(d.token), 1))
	return nil
}

// create sends the seed's example under a new key: 202, pending.
func (d *demo) create(ctx context.Context) error {
	d.say.Step("Ask for the label: a new key is accepted (202) and carried out in the background")
	r, err := d.post(ctx, seedWeight)
	if err != nil {
		return err
	}
	if err := expect(r, http.StatusAccepted, "pending"); err != nil {
		return err
	}
	d.requestID = r.field("id")
	loc := r.header.Get("Location")
	if d.requestID == "" || !strings.HasSuffix(loc, "/v1/label-requests/"+d.requestID) {
		return fmt.Errorf("202 with id %q and Location %q: want Location /v1/label-requests/{id}", d.requestID, loc)
	}
	if r.header.Get("Retry-After") == "" {
		return errors.New("202 without Retry-After")
	}
	return nil
}

// poll follows the Location until the outcome is final, as a client would.
func (d *demo) poll(ctx context.Context) error {
	d.say.Step("Poll the label request until its outcome is final")
	path := "/v1/label-requests/" + d.requestID
	wait := time.Second // the 202's Retry-After
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	for n := 1; ; n++ {
		d.say.Say("(waiting %s, as Retry-After says)", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("label request %s still pending after %s", d.requestID, pollTimeout)
		}
		r, err := d.do(ctx, http.MethodGet, path, nil, nil)
		if err != nil {
			return err
		}
		status := r.field("status")
		if r.code != http.StatusOK || status != "pending" {
			d.say.Request(http.MethodGet, path, d.auth(), nil)
			d.say.Response(r)
			if err := expect(r, http.StatusOK, "succeeded"); err != nil {
				return err
			}
			return d.learnLabel(r)
		}
		d.say.Say("> GET %s   < %s, status pending (poll %d)", path, r, n)
		if s, err := time.ParseDuration(r.header.Get("Retry-After") + "s"); err == nil && s > 0 {
			wait = min(s, 5*time.Second)
		}
	}
}

// learnLabel keeps what later steps check: the label and its day.
func (d *demo) learnLabel(r *response) error {
	d.labelJSON = r.raw("label")
	if json.Unmarshal(d.labelJSON, &d.label) != nil || d.label.LabelID == "" {
		return fmt.Errorf("succeeded without a label: %s", r.body)
	}
	d.say.Say("Succeeded: label %s, tracking number %s, %d cents %s.", d.label.LabelID, d.label.TrackingNo, d.label.CostCents, d.label.Currency)
	return nil
}

// replay sends the very same request again, as a client whose reply got lost
// would: the saved label comes back, nothing is bought.
func (d *demo) replay(ctx context.Context) error {
	d.say.Step("Send the same request again, as after a lost reply: the saved answer is replayed (201)")
	r, err := d.post(ctx, seedWeight)
	if err != nil {
		return err
	}
	if err := expect(r, http.StatusCreated, ""); err != nil {
		return err
	}
	if got := r.header.Get("Idempotent-Replayed"); got != "true" {
		return fmt.Errorf("201 with Idempotent-Replayed %q, want true", got)
	}
	if !sameJSON(r.body, d.labelJSON) {
		return fmt.Errorf("201 replay carries %s, want the label the request made, %s", r.body, d.labelJSON)
	}
	if loc := r.header.Get("Location"); !strings.HasSuffix(loc, "/v1/labels/"+d.label.LabelID) {
		return fmt.Errorf("201 replay with Location %q, want /v1/labels/%s", loc, d.label.LabelID)
	}
	d.say.Say("The label %s again: the answer saved when it was bought. Nothing ran twice.", d.label.LabelID)
	return nil
}

// reuse sends the same key with another body: a client bug, refused.
func (d *demo) reuse(ctx context.Context) error {
	d.say.Step(fmt.Sprintf("Same key, weight changed to %d g (a client bug): refused with 422", changedWeight))
	r, err := d.post(ctx, changedWeight)
	if err != nil {
		return err
	}
	if r.code != http.StatusUnprocessableEntity || r.field("code") != "idempotency_key_reused" {
		return fmt.Errorf("got %s with code %q, want 422 idempotency_key_reused", r, r.field("code"))
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		return fmt.Errorf("422 with Content-Type %q, want application/problem+json", ct)
	}
	d.say.Say("Nothing is stored or bought: the key still names the %d g parcel's label.", seedWeight)
	return nil
}

// carrierView asks the simulator how many labels it sold: one.
func (d *demo) carrierView(ctx context.Context) error {
	d.say.Step("What the carrier saw")
	stats, err := d.carrierStats(ctx, true)
	if err != nil {
		return err
	}
	if d.purchases = stats.Purchases; stats.Purchases != 1 {
		return fmt.Errorf("the carrier sold %d labels, want 1", stats.Purchases)
	}
	d.say.Say("Three requests, one purchase: the worker's carrier key (derived from the caller and our key) makes its calls idempotent too.")
	return nil
}

// reconcile matches the carrier's invoice for the label's day against our
// labels and keys. Discrepancies (exit 1) are findings, shown, not a failure.
func (d *demo) reconcile(ctx context.Context) error {
	d.say.Step("Reconcile today's invoice (" + d.day() + ", UTC) against our labels and keys")
	res, err := d.reconcileDay(ctx)
	if err != nil {
		return err
	}
	if res.ExitCode == 0 {
		d.reconciled = "every invoice line and label matched"
		d.say.Say("exit 0: %s.", d.reconciled)
	} else {
		d.reconciled = "discrepancies reported"
		d.say.Say("exit 1: discrepancies reported above; a finding to act on, not a failure of the demo.")
	}
	return nil
}

// stopAll stops every process, the last started first, and reports each
// exit. A process still stopping when hurry ends is killed.
func (d *demo) stopAll(hurry context.Context) error {
	if d.fleet == nil || len(d.fleet.Procs()) == 0 {
		return nil
	}
	d.say.Step("Stop everything (SIGTERM, last started first)")
	stops := d.fleet.Stop(hurry)
	for _, st := range stops {
		msg := "stopped, exit 0"
		if st.Err != nil {
			msg, _, _ = strings.Cut(st.Err.Error(), "\n")
		}
		d.say.Say("%-9s %s", st.Name, msg)
	}
	return stops.Err()
}

// cleanup removes the binaries it built.
func (d *demo) cleanup() {
	if d.hooks != nil {
		d.hooks.srv.Close()
	}
	if err := d.bins.Remove(); err != nil {
		fmt.Fprintf(d.stderr, "demo: removing %s: %v\n", d.bins.Dir, err)
	}
}

// dumpLogs shows the last lines of every process on stderr, after a failure.
func (d *demo) dumpLogs() {
	if d.fleet == nil {
		return
	}
	for _, p := range d.fleet.Procs() {
		fmt.Fprintf(d.stderr, "\n--- last lines of %s ---\n%s\n", p.Name(), p.Tail(proc.TailLines))
	}
}

func (d *demo) summary() {
	d.say.line("")
	d.say.line("Demo OK: 202 -> succeeded (signed webhook delivered and verified) -> 201 with Idempotent-Replayed: true -> 422 idempotency_key_reused; the carrier sold %d label; reconcile: %s.", d.purchases, d.reconciled)
	if d.voided {
		d.say.line("Then a carrier without keys sold parcel 2 twice: reconcile found the duplicate (run %d), reconcile void voided it once, and the next reconcile netted its credit.", d.runID)
	}
}

// post sends the seed's example under its key with the given weight.
func (d *demo) post(ctx context.Context, weightG int) (*response, error) {
	headers := append(d.auth(),
		header{"Idempotency-Key", idempotencyKey},
		header{"Content-Type", "application/json"})
	body := labelBody(weightG)
	d.say.Request(http.MethodPost, "/v1/labels", headers, body)
	r, err := d.do(ctx, http.MethodPost, "/v1/labels", headers, body)
	if err != nil {
		return nil, err
	}
	d.say.Response(r)
	return r, nil
}

// auth is the Authorization header as printed; do sends the real token.
func (d *demo) auth() []header {
	return []header{{"Authorization", "Bearer " + mask(d.token)}}
}

// do sends a request to the API with the caller's token.
func (d *demo) do(ctx context.Context, method, path string, headers []header, body []byte) (*response, error) {
	return d.send(ctx, method, d.apiURL+path, append(headers, header{"Authorization", "Bearer " + d.token}), body)
}

// send sends a request and reads the whole answer.
func (d *demo) send(ctx context.Context, method, url string, headers []header, body []byte) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, h := range headers {
		req.Header.Set(h.name, h.value)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", req.Method, req.URL.Path, err)
	}
	return &response{proto: resp.Proto, status: resp.Status, code: resp.StatusCode, header: resp.Header, body: b}, nil
}

// expect checks the status code and, when status is set, the LabelRequest's status.
func expect(r *response, code int, status string) error {
	if r.code != code {
		return fmt.Errorf("got %s, want %d %s (body: %s)", r, code, http.StatusText(code), bytes.TrimSpace(r.body))
	}
	if status != "" && r.field("status") != status {
		return fmt.Errorf("got status %q, want %q (body: %s)", r.field("status"), status, bytes.TrimSpace(r.body))
	}
	return nil
}

// sameJSON reports whether a and b are the same JSON value, member order aside.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// mask shows enough of a token to recognise it, not enough to use it.
func mask(token string) string {
	if len(token) <= 8 {
		return "…"
	}
	return token[:8] + "…"
}
