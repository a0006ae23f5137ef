package e2e

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/postgres"
	"github.com/labelkit/labels/webhook"
)

// fillPerHour is the fill test's rate: label requests a simulated hour
// (go tool task fill -- -fill.per-hour=N runs it bigger).
var fillPerHour = flag.Int("fill.per-hour", 60, "TestFill: label requests a simulated hour, a multiple of 10")

// The fill test's retentions, in simulated hours: KEY_RETENTION's default
// (24 h, which River's completed jobs share), and the others as short as the
// worker accepts them, so that every swept table settles within the run.
const (
	fillKeyHours       = 24 // KEY_RETENTION, River's CompletedJobRetentionPeriod
	fillTombstoneHours = 24 // TOMBSTONE_RETENTION
	fillEventHours     = 24 // WEBHOOK_EVENT_RETENTION
	fillIntentHours    = 24 // INTENT_RETENTION (failed intents)
	fillHours          = 60 // the run: every swept table is steady from hour 48
	fillSteadyFrom     = 48 // the window of the level-off and the comparison
	fillStep           = 1  // simulated hours a step: the pipeline runs, then the sweep
	fillRejectEvery    = 10 // one purchase in 10 is rejected: a failed intent
	fillTolerance      = 1.25
	fillLevelOff       = 1.10 // largest ÷ smallest size over the steady window (a few pages at 60 an hour)
)

// fillTables are the tables the fill measures, as named in capacity.md's
// steady-state table: the row's first cell, and how many of the table's
// rows a label request leaves a simulated hour (rows a day ÷ 24, per
// request), and how many simulated hours it keeps them (0: kept).
var fillTables = []struct {
	table, row string
	perRequest float64
	hours      int
}{
	{"idempotency_keys", "`idempotency_keys`", 1, fillKeyHours},
	{"river_job", "`river_job`, completed `buy_label` and `deliver_webhook`", 2, fillKeyHours},
	{"idempotency_tombstones", "`idempotency_tombstones`", 1, fillTombstoneHours},
	{"webhook_events", "`webhook_events`", 1, fillEventHours},
	{"labels", "`labels`", 1 - 1.0/fillRejectEvery, 0},
	// label_intents holds the failed intents (swept) and the succeeded ones
	// (kept with their labels): its prediction is the sum of both rows.
	{"label_intents", "`label_intents`", 0, 0},
}

// TestFill writes a day's worth of label requests at a scaled rate, over
// 60 simulated hours, through the real pipeline (the API, the relay, River's
// buy-label and webhook workers, a carrier rejecting one purchase in 10, a
// webhook receiver), runs the real sweep (jobs.SweepKeysWorker) and River's
// cleaner statement after each simulated hour (a step), vacuums as
// autovacuum would, and
// measures each table. Every table the sweep or River's cleaner purges must
// level off once its retention has passed, at the size docs/capacity.md's
// steady-state table predicts (its bytes a row × rows a day × retention),
// within 1.25×; the labels and their intents grow by the table's bytes a row.
//
// A step is the stretch of the database's clock between two instants the
// test reads (T_i, T_i+1): everything of step i (the accepts, the
// purchases, the deliveries, River's completions) happens after T_i and is
// done before T_i+1. The sweep of step i runs under postgres.AsOf, as of
// T_i-23 + KEY_RETENTION, so that it purges the keys completed before
// T_i-23 (the last 24 hours are kept), and with retentions that put each
// table's bound on a step's start. Nothing waits on the wall clock: what is
// purged is decided by the steps alone.
func TestFill(t *testing.T) {
	if testing.Short() {
		t.Skip("60 simulated hours through the pipeline")
	}
	t.Parallel()
	ctx := t.Context()
	predictions := capacityBytesPerRow(t)

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	s := stacktest.New(t, stacktest.Opts{Webhooks: jobs.WebhookConfig{
		Policy: webhook.Policy{AllowInsecure: true, AllowPrivate: true}, Metrics: metrics.NewWebhooks(nil)}})
	s.Carrier.Script = func(call int, _ string) string {
		if call%fillRejectEvery == 0 {
			return "reject"
		}
		return ""
	}
	// Eight callers, each with its endpoint, take turns: no endpoint has
	// more deliveries at once than it is allowed, so none is held (held
	// deliveries would add updates of their jobs, more as the machine is
	// slower).
	var tokens []string
	for c := range 8 {
		caller := fmt.Sprintf("fill-%d", c)
		tokens = append(tokens, s.Token(caller))
		_, raw, err := webhook.NewSecret()
		require.NoError(t, err)
		_, err = postgres.SetWebhook(ctx, s.Pool, caller, receiver.URL, postgres.Secret{Value: raw})
		require.NoError(t, err)
	}

	// Autovacuum off on the measured tables: the test vacuums after every
	// hour instead, so that each run reuses space alike.
	for _, ft := range fillTables {
		_, err := s.Pool.Exec(ctx, `ALTER TABLE `+ft.table+` SET (autovacuum_enabled = off, toast.autovacuum_enabled = off)`)
		require.NoError(t, err)
	}
	empty := fillSizes(t, s.Pool)

	perHour := *fillPerHour
	require.Zero(t, perHour%fillRejectEvery, "-fill.per-hour: a multiple of %d, so that every hour fails alike", fillRejectEvery)
	m := metrics.New(metrics.Worker)
	cleaner := riverpgxv5.New(s.Pool).GetExecutor()
	steps := fillHours / fillStep
	var starts, asOf []time.Time // T_i, and the as-of time of the sweep of step i
	// windowStart is the start of the window of hours that ends with step i.
	windowStart := func(i, hours int) int { return max(i-hours/fillStep+1, 0) }
	samples := make([]map[string]fillSize, steps)
	sent := 0
	for i := range steps {
		starts = append(starts, dbtestNow(t, s.Pool))
		fillSend(t, s, tokens, sent, perHour*fillStep)
		sent += perHour * fillStep
		fillSettle(t, s.Pool)

		// The sweep of step i: keys completed before the start of the
		// last 24 hours go, and each other table's rows before the start of
		// its own window.
		keyBound := starts[windowStart(i, fillKeyHours)]
		at := keyBound.Add(idempotency.DefaultKeyRetention)
		asOf = append(asOf, at)
		w := &jobs.SweepKeysWorker{Pool: s.Pool, Batch: 1000, Log: zerolog.Nop(), Metrics: m,
			// Tombstones carry the as-of time of the sweep that wrote them.
			TombstoneRetention:    at.Sub(asOf[windowStart(i, fillTombstoneHours)]),
			WebhookEventRetention: at.Sub(starts[windowStart(i, fillEventHours)]),
			IntentRetention:       at.Sub(starts[windowStart(i, fillIntentHours)]),
		}
		require.NoError(t, w.Work(postgres.AsOf(ctx, at), &river.Job[jobs.SweepKeysArgs]{JobRow: &rivertype.JobRow{ID: 1, Kind: "sweep_keys"}}))
		// River's cleaner: its own statement, with the horizon its
		// CompletedJobRetentionPeriod (KEY_RETENTION) gives at hour h.
		for {
			n, err := cleaner.JobDeleteBefore(ctx, &riverdriver.JobDeleteBeforeParams{
				CompletedDoDelete: true, CompletedFinalizedAtHorizon: keyBound, Max: 10_000})
			require.NoError(t, err)
			if n < 10_000 {
				break
			}
		}
		_, err := s.Pool.Exec(ctx, `VACUUM `+fillTableList())
		require.NoError(t, err)
		samples[i] = fillSizes(t, s.Pool)
		if os.Getenv("FILL_SERIES") != "" && i%6 == 5 {
			fillRelations(t, s.Pool)
		}
	}

	rows := fillCounts(t, s.Pool)
	failed := sent / fillRejectEvery
	// Row counts first: what the sweep keeps is exact.
	assert.Equal(t, perHour*fillKeyHours, rows["idempotency_keys"], "keys: the last 24 hours'")
	assert.Equal(t, 2*perHour*fillKeyHours, rows["river_job"], "River: a purchase and a delivery a request, the last 24 hours'")
	assert.Equal(t, perHour*fillTombstoneHours, rows["idempotency_tombstones"])
	assert.Equal(t, perHour*fillEventHours, rows["webhook_events"])
	assert.Equal(t, sent-failed, rows["labels"], "labels are kept")
	assert.Equal(t, sent-failed+perHour*fillIntentHours/fillRejectEvery, rows["label_intents"],
		"succeeded intents are kept, failed ones for INTENT_RETENTION")
	assert.Equal(t, float64(sent-perHour*fillKeyHours), testutil.ToFloat64(m.SweeperDeleted), "keys the sweep purged")

	// Then sizes: each swept table levels off over the steady window, at the
	// prediction.
	perDay := float64(perHour * 24)
	t.Logf("fill: %d requests an hour (%.0f a day), %d hours; bytes over the empty table (main forks: heap, indexes, TOAST), at hour %d", perHour, perDay, fillHours, fillHours)
	t.Logf("%-24s %8s %12s %12s %7s %12s %9s", "table", "rows", "predicted", "measured", "ratio", "B/row", "level-off")
	last := samples[steps-1]
	for _, ft := range fillTables {
		predicted := fillPredict(t, predictions, ft.table, ft.row, perDay, sent-failed, perHour*fillIntentHours/fillRejectEvery, ft.perRequest, ft.hours)
		measured := float64(last[ft.table].main - empty[ft.table].main)
		lo, hi := measured, measured
		for _, sm := range samples[fillSteadyFrom/fillStep:] {
			v := float64(sm[ft.table].main - empty[ft.table].main)
			lo, hi = min(lo, v), max(hi, v)
		}
		t.Logf("%-24s %8d %12.0f %12.0f %7.2f %12.1f %9.3f   (total with FSM and VM: %d B)", ft.table, rows[ft.table], predicted, measured,
			measured/predicted, measured/float64(max(rows[ft.table], 1)), hi/lo, last[ft.table].total-empty[ft.table].total)
		assert.Less(t, measured/predicted, fillTolerance, "%s: measured %.0f B, predicted %.0f B", ft.table, measured, predicted)
		assert.Greater(t, measured/predicted, 1/fillTolerance, "%s: measured %.0f B, predicted %.0f B", ft.table, measured, predicted)
		if ft.hours > 0 {
			assert.LessOrEqual(t, hi/lo, fillLevelOff, "%s grew over hours %d-%d: %.0f to %.0f B", ft.table, fillSteadyFrom, fillHours-1, lo, hi)
		}
	}
	var retried int
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE attempt > 1 OR metadata ? 'snoozes'`).Scan(&retried))
	t.Logf("River jobs attempted more than once or snoozed, of the last 24 hours': %d", retried)
	// River's GIN indexes are left out above: an entry of a job's args
	// (its request_id, its event_id) stays after the job is gone, so they
	// grow with every job ever run, until REINDEX (capacity.md).
	from := samples[fillSteadyFrom/fillStep-1]["river_job"].gin
	t.Logf("river_job GIN indexes: %d B at hour %d, %d B at hour %d: %.1f B a job run in between, kept until REINDEX",
		from, fillSteadyFrom, last["river_job"].gin, fillHours, float64(last["river_job"].gin-from)/float64(2*perHour*(fillHours-fillSteadyFrom)))
	if os.Getenv("FILL_SERIES") != "" {
		fillRelations(t, s.Pool)
	}
	// What the same rows take packed (VACUUM FULL rewrites the table and
	// its indexes), as capacity.md's bytes a row were measured: the rest of
	// the steady size is the room the churn between two vacuums takes.
	_, err := s.Pool.Exec(ctx, `VACUUM FULL `+fillTableList())
	require.NoError(t, err)
	packed := fillSizes(t, s.Pool)
	for _, ft := range fillTables {
		t.Logf("%-24s packed: %7.1f B/row (GIN: %d B)", ft.table, float64(packed[ft.table].main-empty[ft.table].main)/float64(max(rows[ft.table], 1)), packed[ft.table].gin)
	}
	if os.Getenv("FILL_SERIES") != "" {
		fillRelations(t, s.Pool)
		for i, sm := range samples {
			var b strings.Builder
			for _, ft := range fillTables {
				fmt.Fprintf(&b, " %s=%d", ft.table, sm[ft.table].main-empty[ft.table].main)
			}
			t.Logf("hour %2d:%s", (i+1)*fillStep, b.String())
		}
	}
}

// fillPredict is capacity.md's rule for a table: bytes a row × rows a day ×
// retention in days, with the bytes a row of the document's row; a kept
// table (hours 0) holds every row written. label_intents is its succeeded
// intents (kept, one a label) and its failed ones (kept INTENT_RETENTION).
func fillPredict(t *testing.T, bytes map[string]float64, table, row string, perDay float64, labels, failedKept int, perRequest float64, hours int) float64 {
	t.Helper()
	at := func(row string) float64 {
		b, ok := bytes[row]
		require.True(t, ok, "docs/capacity.md's steady-state table has no row %s", row)
		return b
	}
	switch {
	case table == "label_intents":
		return at("`label_intents`, succeeded")*float64(labels) + at("`label_intents`, failed")*float64(failedKept)
	case hours == 0:
		return at(row) * float64(labels)
	default:
		return at(row) * perDay * perRequest * float64(hours) / 24
	}
}

// capacityBytesPerRow reads the bytes a row of every table in the
// steady-state table of docs/capacity.md, by its first cell; a range (the
// key store's, 488–894 B) reads as its upper end, the size as the service
// writes it.
func capacityBytesPerRow(t *testing.T) map[string]float64 {
	t.Helper()
	doc, err := os.ReadFile("../docs/capacity.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "### Steady-state storage")
	require.True(t, ok, "docs/capacity.md has no Steady-state storage section")
	section, _, _ = strings.Cut(section, "\n## ")
	cell := regexp.MustCompile(`^~?([\d,]+)(?:–([\d,]+))? B$`)
	out := map[string]float64{}
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) < 5 || !strings.HasPrefix(cells[0], "`") {
			continue
		}
		m := cell.FindStringSubmatch(cells[1])
		if m == nil {
			continue
		}
		v := m[1]
		if m[2] != "" {
			v = m[2]
		}
		n, err := strconv.ParseFloat(strings.ReplaceAll(v, ",", ""), 64)
		require.NoError(t, err)
		out[cells[0]] = n
	}
	return out
}

// fillSend posts n label requests (keys fill-from… on orders from+1…, the
// callers of tokens in turn), eight at a time, each of which must be
// accepted.
func fillSend(t *testing.T, s *stacktest.Stack, tokens []string, from, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/labels", strings.NewReader(string(stacktest.ParcelBody(int64(i+1), 1, 1000))))
				if err != nil {
					errs <- err
					continue
				}
				req.Header.Set("Authorization", "Bearer "+tokens[i%len(tokens)])
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("fill-%d", i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					errs <- fmt.Errorf("request %d: %s", i, resp.Status)
				}
			}
		})
	}
	for i := from; i < from+n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// fillSettle waits until the hour's work is done: no intent pending, nothing
// in the relay's queue, no webhook event pending, no River job unfinished.
func fillSettle(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left int
		require.NoError(t, pool.QueryRow(t.Context(), `
			SELECT (SELECT count(*) FROM label_intents WHERE status = 'pending')
			     + (SELECT count(*) FROM label_intent_outbox)
			     + (SELECT count(*) FROM webhook_events WHERE state = 'pending')
			     + (SELECT count(*) FROM river_job WHERE finalized_at IS NULL)`).Scan(&left))
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fill: %d intents, events or jobs still unfinished after 2 minutes", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fillSize is a table's size: total (pg_total_relation_size); main, the
// main forks of its heap, its B-tree indexes and its TOAST table and index,
// without the free space and visibility maps, whose few fixed pages a
// relation gets once it has data would weigh on a small table; and gin, its
// GIN indexes (river_job's on args and metadata), which VACUUM never shrinks:
// an entry whose rows are all gone stays in the index until REINDEX.
type fillSize struct{ total, main, gin int64 }

func fillTableList() string {
	names := make([]string, len(fillTables))
	for i, ft := range fillTables {
		names[i] = ft.table
	}
	return strings.Join(names, ", ")
}

func fillSizes(t *testing.T, pool *pgxpool.Pool) map[string]fillSize {
	t.Helper()
	out := map[string]fillSize{}
	for _, ft := range fillTables {
		var s fillSize
		require.NoError(t, pool.QueryRow(t.Context(), `
			WITH rel AS (SELECT $1::regclass AS oid),
			     toast AS (SELECT reltoastrelid AS oid FROM pg_class WHERE oid = (SELECT oid FROM rel) AND reltoastrelid <> 0),
			     parts AS (SELECT oid FROM rel UNION ALL SELECT oid FROM toast
			               UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT oid FROM rel UNION ALL SELECT oid FROM toast))
			SELECT pg_total_relation_size($1::regclass),
			       (SELECT sum(pg_relation_size(p.oid, 'main'))::bigint FROM parts p JOIN pg_class c USING (oid)
			         WHERE c.relam NOT IN (SELECT oid FROM pg_am WHERE amname = 'gin')),
			       (SELECT coalesce(sum(pg_relation_size(p.oid, 'main')), 0)::bigint FROM parts p JOIN pg_class c USING (oid)
			         WHERE c.relam IN (SELECT oid FROM pg_am WHERE amname = 'gin'))`, ft.table).Scan(&s.total, &s.main, &s.gin))
		out[ft.table] = s
	}
	return out
}

func fillCounts(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, ft := range fillTables {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM `+ft.table).Scan(&n))
		out[ft.table] = n
	}
	return out
}

// dbtestNow reads the database's clock in a transaction of its own.
func dbtestNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT now()`).Scan(&now))
	return now
}

// fillRelations logs the size of each table's heap and of each of its
// indexes (FILL_SERIES=1).
func fillRelations(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
		 WHERE c.oid = ANY($1::regclass[]) OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = ANY($1::regclass[]))
		 ORDER BY 1`, strings.Split(fillTableList(), ", "))
	require.NoError(t, err)
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var name string
		var size int64
		require.NoError(t, rows.Scan(&name, &size))
		fmt.Fprintf(&b, " %s=%d", name, size)
	}
	require.NoError(t, rows.Err())
	t.Logf("relations:%s", b.String())
}
