package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/devdb"
)

// TestBenchTiny runs the whole harness with tiny sizes against a private
// PostgreSQL server of its own (the default) and checks that the JSON, the
// Markdown and the PNG are written and add up. Timings are not checked: they
// are what the harness measures, not what a test may assert.
func TestBenchTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts a private PostgreSQL server")
	}
	if _, err := devdb.BinDir(); err != nil {
		t.Skip(err)
	}
	if _, err := devdb.Program("pgbench"); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	out := t.TempDir()
	args := []string{"bench", "--quick", "--out", out,
		"--concurrency", "4,32", "--duration", "1s", "--warmup", "200ms", "--repeat-share", "0.3",
		"--e2e-creates", "40", "--e2e-concurrency", "4", "--sim-latencies", "0s,50ms",
		"--paced-rates", "50,400", "--paced-duration", "2s",
		"--burst-replays", "40", "--burst-concurrency", "4",
		"--replay-sizes", "200,1000", "--replay-rate", "100", "--replay-concurrency", "2",
		"--purge-max", "20s"}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, func(string) string { return "" }, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

	// One set of files, named by the date.
	matches, err := filepath.Glob(filepath.Join(out, "*.json"))
	require.NoError(t, err)
	require.Len(t, matches, 1)
	base := strings.TrimSuffix(matches[0], ".json")
	for _, ext := range []string{".md", ".png"} {
		fi, err := os.Stat(base + ext)
		require.NoError(t, err, ext)
		require.Positive(t, fi.Size(), ext)
	}

	var r Results
	b, err := os.ReadFile(base + ".json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &r))
	require.Empty(t, r.Errors)
	require.Equal(t, "quick", r.Mode)
	require.Equal(t, 1000, r.Setup.WorkerConcurrency)
	require.Equal(t, 400, r.Setup.GOGC, "the api and the worker run with the deployed GOGC")
	require.Equal(t, filepath.Base(base), r.Date)
	require.Positive(t, r.Machine.CPUs)
	require.Contains(t, r.Machine.PostgreSQL, "PostgreSQL")
	require.NotEmpty(t, r.Machine.Settings["synchronous_commit"])

	// The ceiling and the accept, with the worker stopped and with the
	// pipeline live, ran at each concurrency.
	require.Len(t, r.Ceiling, 2)
	require.Len(t, r.Accept, 2)
	require.Len(t, r.AcceptLive, 2)
	for i, c := range []int{4, 32} {
		ce, ac, live := r.Ceiling[i], r.Accept[i], r.AcceptLive[i]
		require.Equal(t, c, ce.Concurrency)
		require.Empty(t, ce.Error)
		require.Positive(t, ce.Transactions)
		require.Zero(t, ce.Failed)
		require.Positive(t, ce.TPS)
		require.Equal(t, int(ce.Transactions), ce.Latency.Count, "one latency per pgbench transaction")
		require.Equal(t, c, ac.Concurrency)
		require.Zero(t, ac.Errors, ac.FirstError)
		require.Positive(t, ac.New)
		require.Positive(t, ac.Repeats, "a share of the requests repeat an earlier key")
		require.Equal(t, ac.New+ac.Repeats, ac.Requests)
		require.Equal(t, ac.Requests, ac.Statuses["202"], "new keys and repeats of pending ones are all 202")
		require.InDelta(t, ac.PerSec/ce.TPS, ac.RatioToCeiling, 0.01)
		require.InDelta(t, ac.Latency.P99/ce.Latency.P99, ac.P99ToCeiling, 0.01)
		require.LessOrEqual(t, ac.Latency.P50, ac.Latency.P99)
		require.Positive(t, ac.DB.Commits, "the database saw the accepts commit")

		require.Equal(t, c, live.Concurrency)
		require.Zero(t, live.Errors, live.FirstError)
		require.Positive(t, live.New)
		require.Equal(t, live.New+live.Repeats, live.Requests)
		require.Equal(t, live.Requests, live.Statuses["202"]+live.Statuses["201"],
			"a repeat is 202 while its intent is pending, 201 once the worker completed it")
		require.InDelta(t, live.PerSec/ce.TPS, live.RatioToCeiling, 0.01)
		require.InDelta(t, live.Latency.P99/ce.Latency.P99, live.P99ToCeiling, 0.01)
		require.GreaterOrEqual(t, live.Drained, int64(live.Statuses["201"]), "a 201 answers a key the worker made final")
		require.Positive(t, live.DB.Commits)
	}

	// End to end: every create became final, timed in the database.
	require.Len(t, r.EndToEnd, 2)
	for _, e := range r.EndToEnd {
		require.Empty(t, e.Error)
		require.EqualValues(t, 40, e.Succeeded)
		require.Zero(t, e.Pending)
		require.Zero(t, e.Failed)
		require.Equal(t, 40, e.Submit.New)
		require.Equal(t, 40, e.ToFinal.Count)
		require.Positive(t, e.CreatesPerSec)
		// Held to the mean of ceilings measured right before and right
		// after it, at its concurrency.
		require.NotNil(t, e.Ceiling)
		require.NotNil(t, e.CeilingAfter)
		require.Equal(t, 4, e.Ceiling.Concurrency)
		require.Equal(t, 4, e.CeilingAfter.Concurrency)
		require.Positive(t, e.Ceiling.TPS)
		require.Positive(t, e.CeilingAfter.TPS)
		require.InDelta(t, (e.Ceiling.TPS+e.CeilingAfter.TPS)/2, e.CeilingTPS, 0.1)
		require.InDelta(t, e.CreatesPerSec/e.CeilingTPS, e.RatioToCeiling, 0.01)
		require.Equal(t, 4, e.CeilingConcurrency)
		// The CPU of a label, by party. A process's CPU is read in clock
		// ticks (10 ms): 40 labels cost the API or the worker alone less
		// than a tick on a fast machine, so only the run's processes
		// together and the machine are held to have used some.
		u := e.CPUPerLabel
		require.Positive(t, u.Ours)
		require.Positive(t, u.Machine)
		for _, party := range []float64{u.Client, u.API, u.Worker, u.Carrier, u.Postgres} {
			require.GreaterOrEqual(t, party, 0.0)
		}
		require.InDelta(t, u.Client+u.API+u.Worker+u.Carrier+u.Postgres, u.Ours, 0.001, "ours is the sum of the run's processes")
		requirePerLabel(t, e.Through)
	}
	require.GreaterOrEqual(t, r.EndToEnd[1].ToFinal.P50, 50.0, "the simulator's 50 ms are inside 202 → final")

	// Paced: every scheduled create sent open loop, answered 202 and made
	// final through the pipeline, beside pgbench paced at the same rate by
	// as many clients.
	require.Len(t, r.Paced, 2)
	require.EqualValues(t, 2, r.Setup.PacedSeconds)
	for i, rate := range []float64{50, 400} {
		pr := r.Paced[i]
		require.Empty(t, pr.Error)
		require.EqualValues(t, rate, pr.Rate)
		require.Equal(t, pacedClients(rate), pr.Clients)
		require.Equal(t, int(2*rate), pr.Scheduled)
		require.EqualValues(t, 50, pr.SimLatencyMs)
		s := pr.Submit
		require.Zero(t, s.Errors, s.FirstError)
		require.Positive(t, s.New)
		require.Zero(t, s.Repeats, "a paced phase sends new creates only")
		require.Equal(t, s.New, s.Statuses["202"])
		require.EqualValues(t, rate, s.Rate)
		require.NotNil(t, s.StartLateness, "an open-loop load says how late its starts were")
		require.Equal(t, s.Requests, s.StartLateness.Count)
		require.EqualValues(t, s.New, pr.Succeeded)
		require.Zero(t, pr.Pending)
		require.Equal(t, s.New, pr.ToFinal.Count)
		require.GreaterOrEqual(t, pr.ToFinal.P50, 50.0, "the simulator's 50 ms are inside 202 → final")
		require.InDelta(t, s.PerSec/peakRate, pr.ShareOfPeak, 0.001)
		requirePerLabel(t, pr.Through)
		pg := pr.Pgbench
		require.NotNil(t, pg)
		require.Empty(t, pg.Error)
		require.Equal(t, pr.Clients, pg.Concurrency)
		require.Positive(t, pg.Transactions)
		require.Equal(t, int(pg.Transactions), pg.Latency.Count, "one latency per pgbench transaction")
		require.Positive(t, pr.PgbenchCPUPerTx)
	}
	// Right after each burst: its keys replayed, then read by primary key.
	require.Equal(t, 40, r.Setup.BurstReplays)
	require.Equal(t, 4, r.Setup.BurstConcurrency)
	for _, e := range r.EndToEnd {
		rp, sel := e.ReplaysAfter, e.SelectAfter
		require.NotNil(t, rp)
		require.Zero(t, rp.Errors, rp.FirstError)
		require.Equal(t, 40, rp.Requests, "exactly --burst-replays replays")
		require.Equal(t, 40, rp.Statuses["201"], "every key of the burst is completed: its label is replayed")
		require.Equal(t, 4, rp.Concurrency)
		require.InDelta(t, rp.Latency.P99/rp.Latency.P50, e.ReplayP99OverP50, 0.01)
		require.NotNil(t, sel)
		require.Empty(t, sel.Error)
		require.EqualValues(t, 40, sel.Transactions, "4 clients read 10 key records each")
		require.Equal(t, 40, sel.Latency.Count, "one latency per pgbench transaction")
		require.Zero(t, sel.Failed)
		require.InDelta(t, rp.Latency.P99/sel.Latency.P99, e.ReplayP99OverSelectP99, 0.01)
	}

	// Replays answer 201 from the filled keys, back to back and paced.
	require.Len(t, r.Replays, 2)
	for i, n := range []int{200, 1000} {
		rp := r.Replays[i]
		require.Equal(t, n, rp.Keys)
		require.Empty(t, rp.Error)
		for _, l := range []LoadRun{rp.Load, rp.Paced} {
			require.Zero(t, l.Errors, l.FirstError)
			require.Positive(t, l.Requests)
			require.Equal(t, l.Requests, l.Statuses["201"])
		}
		require.EqualValues(t, 100, rp.Paced.Rate)
		require.Nil(t, rp.Load.StartLateness, "back to back, a request starts when its client is free")
		require.NotNil(t, rp.Paced.StartLateness)
		require.Equal(t, rp.Paced.Requests, rp.Paced.StartLateness.Count)
		require.LessOrEqual(t, rp.Paced.StartLateness.P99, rp.Paced.Latency.P99, "the lateness is part of the latency")
	}

	// The store: 1000 records of a plausible size, all purged.
	require.NotNil(t, r.Store)
	require.EqualValues(t, 1000, r.Store.Rows)
	require.Greater(t, r.Store.BytesPerRecord, 200.0)
	require.Less(t, r.Store.BytesPerRecord, 4000.0)
	require.InDelta(t, r.Store.BytesPerRecord, r.Store.HeapPerRecord+r.Store.IndexPerRecord+r.Store.ToastPerRecord, 1)
	require.EqualValues(t, 1000, r.Store.Purge.Deleted)
	require.True(t, r.Store.Purge.Complete)

	// The bar makes both its checks, from this run's figures.
	require.Len(t, r.Bar, 2)
	require.Equal(t, "machine CPU per label at 400/s / saturated end to end, simulator 50 ms", r.Bar[0].Name)
	require.InDelta(t, r.Paced[1].CPUPerLabel.Machine/r.EndToEnd[1].CPUPerLabel.Machine, r.Bar[0].Measured, 0.001)
	require.Equal(t, "the 202's p99 at 400/s / pgbench's p99 at 400/s", r.Bar[1].Name)
	require.InDelta(t, r.Paced[1].Submit.Latency.P99/r.Paced[1].Pgbench.Latency.P99, r.Bar[1].Measured, 0.001)

	md, err := os.ReadFile(base + ".md")
	require.NoError(t, err)
	for _, want := range []string{"Accept against the ceiling", "| 4 | ", "| 32 | ", "Accept with the pipeline live", "End to end",
		"Paced", "| 400 | 40 |", "Replays right after each burst", "Replays", "bytes per key record", "The bar"} {
		require.Contains(t, string(md), want)
	}
	require.Contains(t, stdout.String(), "Accept against the ceiling", "the table is printed too")

	f, err := os.Open(base + ".png")
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 600)
	require.Greater(t, img.Bounds().Dy(), 200)
}

// requirePerLabel checks that a run through the pipeline metered its
// labels: CPU by party, and commits and WAL flushes per label made final.
// The database's counters are only added up: each backend reports them at
// most once a second, so a run of a few labels may see none of them yet.
func requirePerLabel(t *testing.T, th Through) {
	t.Helper()
	labels := float64(th.Succeeded + th.Failed)
	require.Positive(t, th.CPUPerLabel.Ours)
	require.Positive(t, th.CPUPerLabel.Machine)
	require.InDelta(t, float64(th.DB.Commits)/labels, th.CommitsPerLabel, 0.006)
	require.InDelta(t, float64(th.DB.WALSyncs)/labels, th.WALFlushesPerLabel, 0.006)
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"QuickAndLong", []string{"--quick", "--long"}, "exclude each other"},
		{"BadConcurrency", []string{"--concurrency", "8,x"}, "--concurrency"},
		{"ZeroConcurrency", []string{"--concurrency", "0"}, "--concurrency 0: 1 to 1000"},
		{"UnknownPhase", []string{"--phases", "ceiling,nap"}, `unknown phase "nap"`},
		{"RemoteServer", []string{"--server", "postgres://db.example:5432/x"}, "loopback"},
		{"Unsorted", []string{"--replay-sizes", "1000,10"}, "increasing"},
		{"Argument", []string{"now"}, "unexpected argument"},
		{"NegativeRate", []string{"--replay-rate", "-1"}, "--replay-rate"},
		{"ZeroPacedRate", []string{"--paced-rates", "400,0"}, "--paced-rates 0: 1 to 100000"},
		{"BadPacedRate", []string{"--paced-rates", "fast"}, "--paced-rates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"bench", "--out", t.TempDir()}, tc.args...), func(string) string { return "" }, &stdout, &stderr)
			require.Equal(t, 2, code)
			require.Contains(t, stderr.String(), tc.want)
		})
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"bench", "--help"}, func(string) string { return "" }, &stdout, &stderr))
	require.Contains(t, stdout.String(), "--quick")
}

func TestSummarizeAndBar(t *testing.T) {
	t.Parallel()
	var ns []int64
	for i := 1; i <= 1000; i++ {
		ns = append(ns, int64(i)*int64(time.Millisecond))
	}
	l := summarize(ns)
	require.Equal(t, 1000, l.Count)
	require.InDelta(t, 500, l.P50, 1)
	require.InDelta(t, 990, l.P99, 1)
	require.InDelta(t, 1000, l.Max, 0.001)

	// The bar holds the paced phase at 400/s to the same run's saturated
	// end-to-end run at 50 ms (CPU per label) and to pgbench at 400/s (p99).
	r := &Results{
		EndToEnd: []E2ERun{{SimLatencyMs: 0, Through: Through{CPUPerLabel: CPUPerLabel{Machine: 1000}}},
			{SimLatencyMs: 50, Through: Through{CPUPerLabel: CPUPerLabel{Machine: 1300}, CreatesPerSec: 1500, CommitsPerLabel: 0.53, WALFlushesPerLabel: 0.14}}},
		Paced: []PacedRun{
			{Rate: 400, Through: Through{Submit: LoadRun{Latency: Latency{P99: 10}}, CPUPerLabel: CPUPerLabel{Machine: 1900}, CommitsPerLabel: 2, WALFlushesPerLabel: 1},
				Pgbench: &PgbenchRun{Latency: Latency{P99: 4}}},
			{Rate: 2000, Through: Through{Submit: LoadRun{Latency: Latency{P99: 1}}, CPUPerLabel: CPUPerLabel{Machine: 99}}, Pgbench: &PgbenchRun{Latency: Latency{P99: 10}}},
		},
	}
	bar := checkBar(r)
	require.Equal(t, []Check{
		{Name: "machine CPU per label at 400/s / saturated end to end, simulator 50 ms", Measured: 1.462, Bar: 1.5, Pass: true,
			Note: "1900 µs (2.00 commits, 1.00 WAL flushes a label) against 1300 µs (0.53, 0.14) at 1500 creates/s"},
		{Name: "the 202's p99 at 400/s / pgbench's p99 at 400/s", Measured: 2.5, Bar: 2, Pass: false,
			Note: "10.00 ms against 4.00 ms, both from the scheduled start; host stole 0.00 cores"},
	}, bar)
	r.Bar = bar
	md := Markdown(r)
	require.Contains(t, md, "| machine CPU per label at 400/s / saturated end to end, simulator 50 ms | 1.462 | ≤ 1.5 | pass |")
	require.Contains(t, md, "| the 202's p99 at 400/s / pgbench's p99 at 400/s | 2.500 | ≤ 2 | **miss** |")
	require.Contains(t, md, "The bar is missed.")
	r.Paced[0].Submit.Latency.P99 = 8
	r.Bar = checkBar(r)
	require.True(t, r.Bar[1].Pass, "a ratio at the bar passes")
	require.Contains(t, Markdown(r), "The bar is met.")

	// Without a paced phase at 400/s, or a saturated run at 50 ms, there is
	// nothing to hold it to.
	require.Empty(t, checkBar(&Results{EndToEnd: r.EndToEnd, Paced: r.Paced[1:]}))
	require.Len(t, checkBar(&Results{EndToEnd: r.EndToEnd[:1], Paced: r.Paced}), 1, "only the p99 check")
}

// A pgbench run's machine CPU per transaction is its core-seconds over its
// transactions, and 0 without one.
func TestCPUPerTx(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 1500, cpuPerTx(&PgbenchRun{Seconds: 10, Transactions: 10000, CPU: CPU{Machine: 1.5}}), 0.001)
	require.Zero(t, cpuPerTx(&PgbenchRun{Seconds: 10, CPU: CPU{Machine: 1.5}}))
}

// Rounds merge into a mean weighted by their seconds, and since turns two
// readings into cores.
func TestMergeCPU(t *testing.T) {
	t.Parallel()
	c := mergeCPU([]weighted[CPU]{{CPU{API: 1, Steal: 0.1}, 1}, {CPU{API: 2, Steal: 0.5}, 3}})
	require.InDelta(t, 1.75, c.API, 1e-9)
	require.InDelta(t, 0.4, c.Steal, 1e-9)

	at := time.Now()
	a := cpuReading{at: at, busy: 5, steal: 10, self: 1}
	b := cpuReading{at: at.Add(2 * time.Second), busy: 8, steal: 11, self: 1.5}
	got := since(a, b)
	require.InDelta(t, 1.5, got.Machine, 1e-9)
	require.InDelta(t, 0.5, got.Steal, 1e-9)
	require.InDelta(t, 0.25, got.Client, 1e-9)
}

// TestReplayBodyMatchesFill checks that a replayed request is the request
// the filled key was made for: the same fingerprint, or the API answers 422.
func TestReplayBodyMatchesFill(t *testing.T) {
	t.Parallel()
	now := time.Now()
	key, intent, err := filledRow(7, now)
	require.NoError(t, err)
	order := int64(replayBase + 7)
	require.Equal(t, keyFor(order), key[1])
	require.Equal(t, order, intent[5])
	var p labels.Parcel
	require.NoError(t, json.Unmarshal(bodyFor(order), &p))
	require.Equal(t, order, p.OrderID)
	canonical, err := idempotency.Canonical(p)
	require.NoError(t, err)
	require.Equal(t, idempotency.Fingerprint("POST", "/v1/labels", canonical), key[2], "the saved fingerprint is the body's")
	require.Equal(t, string(bodyFor(order)), intent[8], "the intent's payload is the body sent")
}

// The pacer hands out every scheduled start, in order, then closes; a
// cancelled context ends it early.
func TestPace(t *testing.T) {
	start := time.Now()
	slots := make(chan time.Time, 100)
	pace(context.Background(), slots, start, start.Add(50*time.Millisecond), 1000, nil)
	var got []time.Time
	for s := range slots {
		got = append(got, s)
	}
	require.Len(t, got, 50)
	for i, s := range got {
		require.Equal(t, start.Add(time.Duration(i)*time.Millisecond), s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slots = make(chan time.Time) // nobody reads: only the cancellation ends it
	pace(ctx, slots, start, start.Add(time.Hour), 1000, nil)
	_, open := <-slots
	require.False(t, open)

	// Poisson arrivals: in order, inside the window, at random intervals of
	// the rate's mean (a seeded draw: the count is the seed's, not the clock's).
	slots = make(chan time.Time, 4096)
	pace(context.Background(), slots, start, start.Add(100*time.Millisecond), 10000, rand.New(rand.NewPCG(1, 2)))
	got = got[:0]
	for s := range slots {
		got = append(got, s)
	}
	require.InDelta(t, 1000, len(got), 100)
	require.True(t, slices.IsSortedFunc(got, time.Time.Compare))
	require.False(t, got[len(got)-1].After(start.Add(100*time.Millisecond)))
	gaps := map[time.Duration]bool{}
	for i := 1; i < len(got); i++ {
		gaps[got[i].Sub(got[i-1])] = true
	}
	require.Greater(t, len(gaps), 100, "the intervals vary")
}

// A paced load measures latency from the scheduled start, and says how late
// the starts were: one client and a server that takes 20 ms for each of
// requests scheduled every 5 ms fall behind by at least 15 ms a request, and
// each answer's latency includes its late start. (The bounds follow from the
// schedule, not from the machine's speed.)
func TestPacedStartLateness(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	spec := loadSpec{Name: "paced", BaseURL: srv.URL, Token: "t", Concurrency: 1, Duration: 100 * time.Millisecond,
		NextOrder: new(atomic.Int64), ReplayFrom: 1, ReplayN: 10, Rate: 200}
	r := runLoad(context.Background(), spec)
	require.Zero(t, r.Errors, r.FirstError)
	require.Equal(t, 20, r.Requests, "every scheduled start of the window is taken up, late or not")
	require.NotNil(t, r.StartLateness)
	require.Equal(t, r.Requests, r.StartLateness.Count)
	// The 20th start comes no earlier than 19 × 20 ms after the first, and was
	// scheduled 19 × 5 ms after it.
	require.GreaterOrEqual(t, r.StartLateness.Max, 19*15.0)
	require.GreaterOrEqual(t, r.Latency.Max, r.StartLateness.Max+20)

	spec.Rate = 0
	require.Nil(t, runLoad(context.Background(), spec).StartLateness)
}

// A timed pgbench run in which not one transaction committed measured
// nothing: it runs again for twice as long, and the run that processed
// transactions is the result. A stand-in pgbench stalls on its first run.
func TestPgbenchRunsAStalledWindowAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "pgbench")
	script := `#!/bin/sh
calls="$0.calls"; echo "$*" >> "$calls"
prefix=""
while [ $# -gt 0 ]; do
  case "$1" in
    --log-prefix) prefix="$2"; shift ;;
  esac
  shift
done
if [ "$(wc -l < "$calls")" -eq 1 ]; then
  : > "$prefix.1"
  echo "number of transactions actually processed: 0"
  echo "number of failed transactions: 0 (NaN%)"
  exit 0
fi
printf '0 0 1500 0 1 1\n0 1 2500 0 1 2\n' > "$prefix.1"
echo "number of transactions actually processed: 2"
echo "number of failed transactions: 0 (0.000%)"
echo "tps = 1.0 (without initial connection time)"
`
	require.NoError(t, os.WriteFile(fake, []byte(script), 0o755))
	var logged []string
	h := &harness{work: dir, pgbench: fake, cpu: &cpuMeter{}, dbURL: "postgres://127.0.0.1:1/none?connect_timeout=1",
		logf: func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }}

	r := h.runPgbench(context.Background(), 32, time.Second)
	require.Empty(t, r.Error)
	require.EqualValues(t, 2, r.Transactions)
	require.InDelta(t, 1, r.TPS, 1e-9)
	require.InDelta(t, 2, r.Seconds, 1e-9, "the second run is twice as long")
	require.InDelta(t, 2.5, r.Latency.P99, 0.01)
	calls, err := os.ReadFile(fake + ".calls")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], "-T 1 ")
	require.Contains(t, lines[1], "-T 2 ")
	require.Equal(t, []string{"    pgbench -c 32 processed no transaction in 1 s; running it for 2 s"}, logged)

	// A run by transaction count, or one that processed any, is the result as it is.
	require.NoError(t, os.WriteFile(fake+".calls", nil, 0o644))
	r = h.pgbenchRun(context.Background(), pgbenchSpec{Script: ceilingScript, Concurrency: 4, PerClient: 10})
	require.Zero(t, r.Transactions)
	require.Contains(t, r.Error, "pgbench printed no tps")
	calls, err = os.ReadFile(fake + ".calls")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(calls), "\n"))
}

// A load's client keeps one connection per goroutine and sends each create
// whole (key, token, body); a server that closes the connection after an
// answer gets the next create on a new one.
func TestLoadClientKeepsItsConnection(t *testing.T) {
	t.Parallel()
	for _, closing := range []bool{false, true} {
		var conns atomic.Int64
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil || r.Header.Get("Authorization") != "Bearer t" || r.Header.Get("Idempotency-Key") == "" ||
				!bytes.Equal(body, bodyFor(must(strconv.ParseInt(strings.Split(r.Header.Get("Idempotency-Key"), ":")[1], 10, 64)))) {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			if closing {
				w.Header().Set("Connection", "close")
			}
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id":"lr_1"}`))
		}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		srv.Start()
		spec := loadSpec{Name: "count", BaseURL: srv.URL, Token: "t", Concurrency: 1, NextOrder: new(atomic.Int64), Count: 5}
		r := runLoad(context.Background(), spec)
		srv.Close()
		require.Zero(t, r.Errors, r.FirstError)
		require.Equal(t, 5, r.New)
		want := map[bool]int64{false: 1, true: 5}[closing]
		require.Equal(t, want, conns.Load(), "connections, the server closing each: %v", closing)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The pacer's sleep lasts at least what it was asked, again and again on one
// timer (a sleep that returned early would start a create before its
// scheduled time).
func TestPreciseSleeper(t *testing.T) {
	t.Parallel()
	sleep, done := preciseSleeper()
	defer done()
	for _, d := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 0, 500 * time.Microsecond} {
		began := time.Now()
		sleep(d)
		require.GreaterOrEqual(t, time.Since(began), d)
	}
}
