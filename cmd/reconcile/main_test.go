package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/reconcile"
)

// The command runs on the real clock: its invoices bill a day well past the
// default grace period.
var day = time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -5)

type label struct {
	n         int
	cl, trk   string
	costCents int64
	createdAt time.Time
}

func (l label) requestID() string  { return fmt.Sprintf("lr_%d", l.n) }
func (l label) idemKey() string    { return fmt.Sprintf("label:%d:1:v1", l.n) }
func (l label) carrierKey() string { return carrier.DeriveKey("fulfilment", l.idemKey()) }

// line is the invoice line that bills l as it should.
func (l label) line(lineNo int) string {
	return fmt.Sprintf("INV-%s,%d,%s,%s,%s,%s,%s,%d,USD", day.Format("20060102"), lineNo,
		l.createdAt.Format(time.RFC3339), l.cl, l.trk, l.carrierKey(), l.requestID(), l.costCents)
}

// insert writes a label as the worker's completion does: intent, completed key, label.
func insert(t *testing.T, pool *pgxpool.Pool, l label) {
	t.Helper()
	ctx := context.Background()
	hash := sha256.Sum256([]byte(l.requestID()))
	labelID := fmt.Sprintf("lbl_%d", l.n)
	body := fmt.Sprintf(`{"label_id":%q,"order_id":%d,"parcel_no":1,"label_version":1,"service":"ground","tracking_no":%q,"carrier_label_id":%q,"cost_cents":%d,"currency":"USD","created_at":%q}`,
		labelID, l.n, l.trk, l.cl, l.costCents, l.createdAt.Format(time.RFC3339))
	_, err := pool.Exec(ctx, `
		INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no,
		                           label_version, payload, carrier_key, status, label_id, created_at, completed_at)
		VALUES ($1, 'fulfilment', $2, $3, 1, $4, 1, 1, '{}', $5, 'succeeded', $6, $7, $7)`,
		l.requestID(), l.idemKey(), hash[:], l.n, l.carrierKey(), labelID, l.createdAt)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO labels (label_id, caller_id, request_id, order_id, parcel_no, label_version, service, tracking_no,
		                    carrier_label_id, carrier_key, cost_cents, currency, created_by_key, created_at)
		VALUES ($1, 'fulfilment', $2, $3, 1, 1, 'ground', $4, $5, $6, $7, 'USD', $8, $9)`,
		labelID, l.requestID(), l.n, l.trk, l.cl, l.carrierKey(), l.costCents, l.idemKey(), l.createdAt)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, state,
		                              response_status, response_body, created_at, expires_at)
		VALUES ('fulfilment', $1, $2, 1, $3, 'completed', 201, $4::text::json, $5, $5::timestamptz + interval '1 day')`,
		l.idemKey(), hash[:], l.requestID(), body, l.createdAt)
	require.NoError(t, err)
}

type result struct {
	code           int
	stdout, stderr string
}

func runCmd(env map[string]string, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"reconcile"}, args...), clitest.Env(env), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "invoice.csv")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

const header = "invoice_no,line_no,billed_at,carrier_label_id,tracking_no,idempotency_key,reference,cost_cents,currency\n"

// requireHelp checks that args print a usage holding want, and exit 0.
func requireHelp(t *testing.T, want string, args ...string) {
	t.Helper()
	r := runCmd(nil, args...)
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, want)
	require.Empty(t, r.stderr)
}

// refusal is a command line the command refuses to start with, and what
// its one line says.
type refusal struct {
	args []string
	env  map[string]string
	want string
}

// requireRefused checks that the command refuses to start: exit 2 and one
// line, prefixed by the command's name, that holds want.
func requireRefused(t *testing.T, name string, env map[string]string, args []string, want string) {
	t.Helper()
	r := runCmd(env, args...)
	require.Equal(t, 2, r.code, "%v", args)
	require.Empty(t, r.stdout)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	require.True(t, strings.HasPrefix(r.stderr, name+": "), r.stderr)
	require.Contains(t, r.stderr, want)
}

func TestHelp(t *testing.T) {
	t.Parallel()
	requireHelp(t, "Usage: reconcile (--invoice FILE | --date YYYY-MM-DD)", "--help")
}

// A bad flag or value exits 2 with one line, before touching anything.
func TestBadConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range []refusal{
		{nil, nil, "give --invoice FILE or --date YYYY-MM-DD"},
		{[]string{"--invoice", "a.csv", "--date", "2026-12-02"}, nil, "not both"},
		{[]string{"--date", "2026-12-32"}, nil, `invalid --date "2026-12-32"`},
		{[]string{"--invoice", "a.csv", "--grace", "two days"}, nil, `invalid --grace "two days"`},
		{[]string{"--invoice", "a.csv", "--grace", "-1h"}, nil, "must not be negative"},
		{[]string{"--invoice", "a.csv", "--stuck-after", "1"}, nil, `invalid --stuck-after "1"`},
		{[]string{"--invoice", "a.csv", "--format", "xml"}, nil, `invalid --format "xml"`},
		{[]string{"--invoice", "a.csv", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"--frobnicate"}, nil, "flag provided but not defined: -frobnicate"},
		{[]string{"--invoice", "a.csv"}, map[string]string{"LOG_LEVEL": "loud"}, `invalid LOG_LEVEL "loud"`},
		{[]string{"--invoice", "a.csv"}, map[string]string{"LOG_FORMAT": "xml"}, `invalid LOG_FORMAT "xml"`},
		{[]string{"--date", "2026-12-02"}, map[string]string{"CARRIER_URL": "carrier:8090"}, `invalid CARRIER_URL "carrier:8090"`},
		{[]string{"--invoice", "a.csv"}, map[string]string{"DATABASE_URL": "postgres://h:notaport/db"}, "invalid DATABASE_URL"},
	} {
		requireRefused(t, "reconcile", tc.env, tc.args, tc.want)
	}
}

func TestInvoiceFile(t *testing.T) {
	t.Parallel()
	pool, url := dbtest.New(t)
	env := map[string]string{"DATABASE_URL": url}
	l := label{n: 1, cl: "CL-1", trk: "GRD000000001", costCents: 612, createdAt: day.Add(10 * time.Hour)}
	insert(t, pool, l)

	// Every item matched: 0, and the summary on stdout.
	ok := writeFile(t, header+l.line(1)+"\n")
	r := runCmd(env, "--invoice", ok)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "every item matched: exit status 0")
	require.Empty(t, r.stderr, "quiet when standard error is not a terminal")

	// A charge with no label of ours: 1, in each format.
	bad := writeFile(t, header+l.line(1)+"\n"+fmt.Sprintf("INV-%s,2,%s,CL-F1,GRD9-X,,,845,USD\n", day.Format("20060102"), day.Add(11*time.Hour).Format(time.RFC3339)))
	r = runCmd(env, "--invoice", bad)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, "billed_without_label: first 1 of 1")

	r = runCmd(env, "--invoice", bad, "--format", "json")
	require.Equal(t, 1, r.code, r.stderr)
	var doc struct {
		Counts map[string]int `json:"counts"`
		Items  []struct {
			Category string `json:"category"`
			LineNo   int    `json:"line_no"`
		} `json:"items"`
		ExitStatus int `json:"exit_status"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Equal(t, 1, doc.Counts["billed_without_label"])
	require.Equal(t, 1, doc.ExitStatus)
	require.Len(t, doc.Items, 2)

	out := filepath.Join(t.TempDir(), "report.csv")
	r = runCmd(env, "--invoice", bad, "--format", "csv", "--out", out)
	require.Equal(t, 1, r.code, r.stderr)
	require.Empty(t, r.stdout)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, "category", rows[0][2])
	require.Equal(t, []string{"matched", "billed_without_label"}, []string{rows[1][2], rows[2][2]})

	var runs int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM reconcile_runs`).Scan(&runs))
	require.Equal(t, 4, runs, "each run is saved")
}

// --date fetches the day's invoice from the carrier, with its token.
func TestDate(t *testing.T) {
	t.Parallel()
	pool, url := dbtest.New(t)
	at := day.Add(9 * time.Hour)
	simulator, err := sim.New(&sim.Options{Token: "s3cret", NowFunc: func() time.Time { return at }})
	require.NoError(t, err)
	srv := httptest.NewServer(simulator)
	t.Cleanup(srv.Close)

	l := label{n: 7}
	bought, err := carrier.NewClient(srv.URL, &carrier.ClientOpts{Token: "s3cret"}).Buy(context.Background(), l.carrierKey(),
		carrier.PurchaseRequest{Reference: l.requestID(), OrderID: 7, ParcelNo: 1, WeightG: 1000, Service: "ground",
			ShipTo: carrier.Address{Name: "A", Line1: "1 Street", City: "Town", PostalCode: "10115", Country: "DE"}})
	require.NoError(t, err)
	l.cl, l.trk, l.costCents, l.createdAt = bought.CarrierLabelID, bought.TrackingNo, bought.CostCents, at.Add(time.Second)
	insert(t, pool, l)

	env := map[string]string{"DATABASE_URL": url, "CARRIER_URL": srv.URL, "CARRIER_TOKEN": "s3cret"}
	r := runCmd(env, "--date", day.Format(time.DateOnly))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "reconcile run 1: carrier:"+day.Format(time.DateOnly))
	require.Contains(t, r.stdout, "lines    1 read")

	// The day before: nothing billed, nothing of ours, all matched.
	r = runCmd(env, "--date", day.AddDate(0, 0, -1).Format(time.DateOnly))
	require.Equal(t, 0, r.code, r.stderr)

	// The nightly form, which needs no shell to compute the day: yesterday (UTC).
	before := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	r = runCmd(env, "--date", "yesterday")
	after := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, strings.Contains(r.stdout, "carrier:"+before) || strings.Contains(r.stdout, "carrier:"+after), r.stdout)

	env["CARRIER_TOKEN"] = "wrong"
	r = runCmd(env, "--date", day.Format(time.DateOnly))
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "401")
}

// An unreachable database or carrier, or a missing, unreadable or malformed
// invoice, is exit 2 and one plain line on stderr that says why, prefixed by
// the command's name, as a refused flag is (the default LOG_FORMAT, json,
// formats the log, not this line).
func TestErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	ln.Close()
	_, url := dbtest.New(t)
	db := map[string]string{"DATABASE_URL": url}

	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"database unreachable", map[string]string{"DATABASE_URL": "postgres://" + closed + "/labels?sslmode=disable"},
			[]string{"--invoice", writeFile(t, header)}, closed},
		{"carrier unreachable", map[string]string{"CARRIER_URL": "http://" + closed}, []string{"--date", "2026-12-02"},
			"fetching the invoice of 2026-12-02"},
		{"missing file", db, []string{"--invoice", filepath.Join(t.TempDir(), "missing.csv")}, "missing.csv: no such file or directory"},
		{"unreadable file", db, []string{"--invoice", t.TempDir()}, "is a directory"},
		{"malformed file", db, []string{"--invoice", writeFile(t, header+"INV-1,1,yesterday,CL-1,GRD1,,,612,USD\n")},
			"invoice.csv:2: billed_at: want an RFC 3339 time"},
		{"void of no run", db, []string{"void", "--run", "424242"}, "no run 424242 is saved"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runCmd(c.env, c.args...)
			require.Equal(t, 2, r.code, r.stderr)
			require.Empty(t, r.stdout)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
			name := "reconcile: "
			if c.args[0] == "void" {
				name = "reconcile void: "
			}
			require.True(t, strings.HasPrefix(r.stderr, name), "plain text prefixed by the command: %q", r.stderr)
			require.False(t, json.Valid([]byte(r.stderr)), "not a log line: %q", r.stderr)
			require.Contains(t, r.stderr, c.want)
		})
	}
}

// On a terminal, one line is rewritten as the run goes and ends with the
// lines read and matched.
func TestProgress(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p := &progress{w: &out}
	p.report(reconcile.Progress{Phase: "read", LinesRead: 25_000})
	p.report(reconcile.Progress{Phase: "read", LinesRead: 50_000}) // within 200ms of the last: skipped
	p.report(reconcile.Progress{Phase: "match", Step: "match by carrier key", LinesRead: 1_000_000})
	p.report(reconcile.Progress{Phase: "done", LinesRead: 1_000_000, LinesMatched: 998_123})
	p.end()
	require.Equal(t, "\r\033[Kreconcile: 25,000 lines read"+
		"\r\033[Kreconcile: 1,000,000 lines read; match by carrier key"+
		"\r\033[Kreconcile: 1,000,000 lines read, 998,123 matched\n", out.String())
	out.Reset()
	p.report(reconcile.Progress{Phase: "done", LinesRead: 1, LinesMatched: 1})
	require.Equal(t, "\r\033[Kreconcile: 1 line read, 1 matched\n", out.String())
	require.False(t, isTerminal(&out))
	// A regular file is an *os.File but no terminal: quiet too.
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f))
}

// Without DATABASE_URL the PG* variables name the database, as for the other
// commands (operations.md).
func TestPGVariables(t *testing.T) {
	pool, dbURL := dbtest.New(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	pg := map[string]string{
		"PGHOST": u.Hostname(), "PGPORT": u.Port(), "PGUSER": u.User.Username(),
		"PGDATABASE": strings.TrimPrefix(u.Path, "/"), "PGSSLMODE": "disable",
	}
	for k, v := range pg {
		t.Setenv(k, v) // pgx reads them from the process
	}
	l := label{n: 1, cl: "CL-1", trk: "GRD000000001", costCents: 612, createdAt: day.Add(10 * time.Hour)}
	insert(t, pool, l)
	r := runCmd(pg, "--invoice", writeFile(t, header+l.line(1)+"\n"))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "every item matched: exit status 0")
}

// lazyBody is a body of head, n bytes of fill, then tail, made as it is
// read: a 200 MB field costs no memory of its own.
type lazyBody struct {
	head, tail string
	n          int64
	off        int64
}

func (l *lazyBody) Read(p []byte) (int, error) {
	h, size := int64(len(l.head)), int64(len(l.head))+l.n+int64(len(l.tail))
	if l.off >= size {
		return 0, io.EOF
	}
	var c int
	switch {
	case l.off < h:
		c = copy(p, l.head[l.off:])
	case l.off < h+l.n:
		c = int(min(int64(len(p)), h+l.n-l.off))
		for i := range p[:c] {
			p[i] = 'r'
		}
	default:
		c = copy(p, l.tail[l.off-h-l.n:])
	}
	l.off += int64(c)
	return c, nil
}

// --date reads the carrier's answer within the bounds of the invoice: a
// 200 MB reference is refused as longer than 255 bytes, naming the line, as
// a file's would be, having read a few kilobytes of it.
func TestDateFieldTooLong(t *testing.T) {
	// Not parallel: the allocation counters are the process's.
	_, dbURL := dbtest.New(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/csv")
		io.Copy(w, &lazyBody{ //nolint:errcheck // the client hangs up
			head: header + "INV-1,1,2026-12-02T10:00:00Z,CL-1,GRD1,carrier:k1,lr_1,612,USD\n" +
				"INV-1,2,2026-12-02T10:00:01Z,CL-2,GRD2,carrier:k2,",
			n:    200 << 20,
			tail: ",612,USD\n",
		})
	}))
	t.Cleanup(srv.Close)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := runCmd(map[string]string{"DATABASE_URL": dbURL, "CARRIER_URL": srv.URL, "LOG_FORMAT": "console"}, "--date", "2026-12-02")
	runtime.ReadMemStats(&after)
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "carrier:2026-12-02:3: reference: longer than 255 bytes")
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %.1f MB for an answer of 200 MB", float64(allocated)/(1<<20))
	require.Less(t, allocated, uint64(16<<20), "bytes allocated while refusing a 200 MB field")
}

// The fetched invoice is bounded in all: up to the limit it is read, past it
// the fetch fails, saying so.
func TestFetchInvoiceLimit(t *testing.T) {
	t.Parallel()
	var body strings.Builder
	body.WriteString(header)
	for i := 1; body.Len() < 10_000; i++ {
		fmt.Fprintf(&body, "INV-1,%d,2026-12-02T10:00:00Z,CL-%d,GRD%d,,,612,USD\n", i, i, i)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("date") == "2026-12-03" {
			http.Error(w, `{"code":"no_invoice","message":"`+strings.Repeat("x", 1000)+`"}`, http.StatusNotFound)
			return
		}
		io.WriteString(w, body.String()) //nolint:errcheck
	}))
	t.Cleanup(srv.Close)
	cfg := Config{CarrierURL: srv.URL, Date: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	size := int64(body.Len())

	for _, limit := range []int64{size, size + 1, 1 << 20} {
		got, err := fetchInvoice(context.Background(), cfg, "carrier:2026-12-02", limit)
		require.NoError(t, err, "limit %d", limit)
		require.Equal(t, body.String(), string(got))
	}
	for _, limit := range []int64{size - 1, 4096, 0} {
		_, err := fetchInvoice(context.Background(), cfg, "carrier:2026-12-02", limit)
		require.ErrorIs(t, err, errInvoiceTooLarge, "limit %d", limit)
		require.EqualError(t, err, fmt.Sprintf("fetching the invoice of 2026-12-02 from %s: the invoice is larger than the limit (%d bytes)", srv.URL, limit))
	}
	// An answer other than the invoice is not an invoice: its bounds are the client's.
	cfg.Date = cfg.Date.AddDate(0, 0, 1)
	_, err := fetchInvoice(context.Background(), cfg, "carrier:2026-12-03", 100)
	var rejected *carrier.RejectedError
	require.ErrorAs(t, err, &rejected)
	require.Equal(t, "no_invoice", rejected.Code)
}

func TestParseDate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 0, 30, 0, 0, time.FixedZone("CET", 3600)) // 2026-12-02 23:30 UTC
	for in, want := range map[string]string{"yesterday": "2026-12-01", "today": "2026-12-02", "2026-11-30": "2026-11-30"} {
		got, err := parseDate(in, now)
		require.NoError(t, err, in)
		require.Equal(t, want, got.Format(time.DateOnly), in)
		require.Equal(t, time.UTC, got.Location(), in)
	}
	for _, bad := range []string{"Yesterday", "tomorrow", "-1d", "2026-12-32", ""} {
		_, err := parseDate(bad, now)
		require.Error(t, err, bad)
	}
}
