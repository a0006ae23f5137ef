package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels/internal/proc"
)

// ceilingScript is the accept's own transaction for pgbench: one key record
// and one label intent, as postgres/accept.go writes them (the same columns,
// the same ON CONFLICT clauses, values of the same sizes: a 20-odd character
// key, a 32-byte hash, a 29-character request id, a 230-byte payload, a
// 51-character carrier key), committed. What the real accept adds is left out
// on purpose: SET LOCAL lock_timeout and the tombstone look-up. So
// is everything outside the database (HTTP, JSON, validation, the client,
// the notification sent after the commit).
//
// pgbench would take ":1" in a string for a variable, so colons are written as
// chr(58) and, in the payload, as '#' replaced by one.
const ceilingScript = `\set k random(1000000000000, 9000000000000000)
BEGIN;
INSERT INTO idempotency_keys
       (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
VALUES ('bench', concat_ws(chr(58), 'label', :k::bigint, '1', 'v1'), sha256(int8send(:k::bigint)), 1,
        'lr_' || lpad((:k::bigint)::text, 26, '0'), 'started', now(), now() + interval '24 hours')
ON CONFLICT (caller_id, idem_key) DO NOTHING;
INSERT INTO label_intents
       (request_id, caller_id, idem_key, request_hash, fingerprint_version,
        order_id, parcel_no, label_version, payload, carrier_key, created_at)
VALUES ('lr_' || lpad((:k::bigint)::text, 26, '0'), 'bench', concat_ws(chr(58), 'label', :k::bigint, '1', 'v1'),
        sha256(int8send(:k::bigint)), 1, :k::bigint, 1, 1,
        replace('{"order_id"#918273,"parcel_no"#1,"weight_g"#1450,"service"#"ground","label_version"#1,"ship_to"#{"name"#"A. Example","line1"#"1 Example Street","line2"#"","city"#"Exampleton","postal_code"#"10115","country"#"DE"}}', '#', chr(58))::jsonb,
        'carrier' || chr(58) || rtrim(encode(sha256(int8send(:k::bigint)), 'base64'), '='), now())
ON CONFLICT (caller_id, order_id, parcel_no, label_version) WHERE status IN ('pending', 'succeeded') DO NOTHING;
COMMIT;
`

// selectScript is the floor of a replay for pgbench: one key record read by
// its primary key, the columns the API reads (postgres.GetKey), a key drawn
// uniformly from the orders lo to hi (the end-to-end burst's, so the same
// rows the replays read). selectScriptFor fills in the range.
const selectScript = `\set o random(%d, %d)
SELECT caller_id, idem_key, request_hash, fingerprint_version, request_id, state,
       locked_until, lease_token, coalesce(response_status, 0), response_body::text, created_at, expires_at
  FROM idempotency_keys
 WHERE caller_id = '%s' AND idem_key = concat_ws(chr(58), 'label', :o::bigint, '1', 'v1');
`

func selectScriptFor(lo, hi int64) string { return fmt.Sprintf(selectScript, lo, hi, callerName) }

var (
	pgbenchTPS    = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	pgbenchTxns   = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	pgbenchFailed = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
)

// runPgbench runs the ceiling script at one concurrency for d (whole seconds)
// and reads its per-transaction log for the latency percentiles.
func (h *harness) runPgbench(ctx context.Context, concurrency int, d time.Duration) PgbenchRun {
	return h.pgbenchRun(ctx, pgbenchSpec{Script: ceilingScript, Concurrency: concurrency, Duration: d})
}

// pgbenchSpec is one pgbench run: a script at a concurrency, for a duration
// (whole seconds) or a number of transactions per client.
type pgbenchSpec struct {
	Script      string
	Concurrency int
	Duration    time.Duration
	PerClient   int     // when positive: -t PerClient instead of -T
	Rate        float64 // when positive: -R Rate, latency from each scheduled start
}

// stalledRetries bounds the reruns of a timed pgbench run without a transaction.
const stalledRetries = 3

// pgbenchRun runs spec (-M prepared, -j 2 at most), its percentiles taken
// from the per-transaction log (-l); a timed run in which not one
// transaction committed runs again for twice as long (docs/benchmarks.md).
func (h *harness) pgbenchRun(ctx context.Context, spec pgbenchSpec) PgbenchRun {
	for try := 0; ; try++ {
		r, stalled := h.pgbenchOnce(ctx, spec)
		if !stalled || try == stalledRetries || ctx.Err() != nil {
			return r
		}
		h.logf("    pgbench -c %d processed no transaction in %.0f s; running it for %.0f s", spec.Concurrency, r.Seconds, 2*r.Seconds)
		spec.Duration = 2 * time.Duration(r.Seconds*float64(time.Second))
	}
}

// pgbenchOnce is one run of spec; stalled says it was a timed run that
// exited cleanly without processing a transaction.
func (h *harness) pgbenchOnce(ctx context.Context, spec pgbenchSpec) (r PgbenchRun, stalled bool) {
	concurrency := spec.Concurrency
	r = PgbenchRun{Concurrency: concurrency, Threads: min(2, concurrency)}
	secs := max(1, int(math.Ceil(spec.Duration.Seconds())))
	dir, err := os.MkdirTemp(h.work, "pgbench-")
	if err != nil {
		r.Error = err.Error()
		return r, false
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(script, []byte(spec.Script), 0o644); err != nil {
		r.Error = err.Error()
		return r, false
	}
	prefix := filepath.Join(dir, "txn")
	length := []string{"-T", strconv.Itoa(secs)}
	if spec.PerClient > 0 {
		length = []string{"-t", strconv.Itoa(spec.PerClient)}
	}
	args := append([]string{"-n", "-M", "prepared", "-c", strconv.Itoa(concurrency), "-j", strconv.Itoa(r.Threads)}, length...)
	if spec.Rate > 0 {
		args = append(args, "-R", strconv.FormatFloat(spec.Rate, 'f', -1, 64))
	}
	args = append(args, "-f", script, "-l", "--log-prefix", prefix, h.dbURL)
	cmd := exec.CommandContext(ctx, h.pgbench, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	stop := h.meter(ctx)
	err = cmd.Run()
	r.CPU, r.DB = stop()
	wall := time.Since(began).Seconds()
	r.CPU.Client = 0 // the harness only waited
	if cmd.ProcessState != nil && wall > 0 {
		r.CPU.Pgbench = round2((cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds() / wall)
	}
	text := out.String()
	if err != nil {
		r.Error = fmt.Sprintf("pgbench: %v: %s", err, proc.LastLines(text, 5))
		return r, false
	}
	if m := pgbenchTPS.FindStringSubmatch(text); m != nil {
		r.TPS = round1(atof(m[1]))
	}
	m := pgbenchTxns.FindStringSubmatch(text)
	if m != nil {
		r.Transactions, _ = strconv.ParseInt(m[1], 10, 64)
	}
	stalled = spec.PerClient == 0 && m != nil && r.Transactions == 0
	if m := pgbenchFailed.FindStringSubmatch(text); m != nil {
		r.Failed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	r.Seconds = float64(secs)
	if spec.PerClient > 0 {
		r.Seconds = round2(wall)
	}
	lat, err := readPgbenchLogs(prefix)
	if err != nil {
		r.Error = err.Error()
	}
	r.Latency, r.lat = summarize(lat), lat
	if r.TPS == 0 {
		r.Error = "pgbench printed no tps: " + proc.LastLines(text, 5)
	}
	return r, stalled
}

// readPgbenchLogs reads the latencies (third field, microseconds) of every
// per-transaction log file pgbench wrote under prefix.
func readPgbenchLogs(prefix string) ([]int64, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no pgbench transaction log under %s", prefix)
	}
	var out []int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			// Lines whose third field is "failed" or "skipped" are left out.
			if fields := strings.Fields(line); len(fields) >= 3 {
				if us, err := strconv.ParseInt(fields[2], 10, 64); err == nil {
					out = append(out, us*1000)
				}
			}
		}
	}
	return out, nil
}

func atof(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
