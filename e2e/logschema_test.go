package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/proc"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/proctest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
)

// logLevels are the levels a line may carry (LOG_LEVEL's, and River's
// mapped onto them).
var logLevels = map[string]bool{"debug": true, "info": true, "warn": true, "error": true}

// unitless are the names of a duration field that do not say its unit; a
// duration is named NAME_ms (docs/operations.md, "Logs").
var unitless = regexp.MustCompile(`(^|[._])(duration|elapsed|took|retry_in|latency|wait|delay|backoff|timeout|lease|skew|uncertainty|interval|sleep|after|age)$`)

// checkLogLine holds one line of a process's log to the schema of
// docs/operations.md: a JSON object with level, message, time (RFC 3339) and
// service, an error under error, and no duration field without its unit.
// It returns the line's
// fields.
func checkLogLine(t *testing.T, service string, l proc.Line) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(l.Text), &m); err != nil {
		t.Errorf("%s %s: not a JSON log line: %q", service, l.Stream, l.Text)
		return nil
	}
	if lv, _ := m["level"].(string); !logLevels[lv] {
		t.Errorf("%s: level %v not one of debug, info, warn, error: %s", service, m["level"], l.Text)
	}
	if msg, _ := m["message"].(string); msg == "" {
		t.Errorf("%s: no message: %s", service, l.Text)
	}
	if ts, _ := m["time"].(string); ts == "" {
		t.Errorf("%s: no time: %s", service, l.Text)
	} else if _, err := time.Parse(time.RFC3339, ts); err != nil {
		t.Errorf("%s: time %q is not RFC 3339: %s", service, ts, l.Text)
	}
	if m["service"] != service {
		t.Errorf("%s: service %v: %s", service, m["service"], l.Text)
	}
	if _, ok := m["err"]; ok {
		t.Errorf("%s: an error under err, not error: %s", service, l.Text)
	}
	for k := range m {
		if unitless.MatchString(k) {
			t.Errorf("%s: field %q is a duration without its unit (%s_ms): %s", service, k, k, l.Text)
		}
	}
	return m
}

// Every line of every process is one JSON object of one schema: the api,
// a worker (River's own lines included), the carrier simulator and
// reconcile, driven through a label request to its final state, its
// replay, refused requests, a job River cannot run, a reconcile run and a
// stop. A line about a job carries job_id; an API request line carries
// http_request_id, and caller once authenticated.
func TestEveryProcessWritesOneLogSchema(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bins := proctest.BuildT(t, "./cmd/api", "./cmd/worker", "./cmd/carrier", "./cmd/reconcile")
	_, dbURL := dbtest.New(t)

	type named struct {
		name string
		line proc.Line
	}
	var mu sync.Mutex
	var lines []named
	f := proctest.Fleet(t, fleet.Config{Bins: bins, Env: map[string]string{"DATABASE_URL": dbURL, "LOG_LEVEL": "debug"},
		OnLine: func(name string, l proc.Line) {
			mu.Lock()
			defer mu.Unlock()
			lines = append(lines, named{name, l})
		}})
	_, err := f.Start(ctx, fleet.Spec{Bin: "carrier"})
	require.NoError(t, err)
	token, err := f.AddCaller(ctx, "shop", nil)
	require.NoError(t, err)
	api, err := f.Start(ctx, fleet.Spec{Bin: "api"})
	require.NoError(t, err)
	worker, err := f.Start(ctx, fleet.Spec{Bin: "worker", Env: map[string]string{"RETRY_BASE": "100ms"}})
	require.NoError(t, err)

	s := &stacktest.Stack{T: t, URL: api.URL()}
	body := stacktest.ParcelBody(4711, 1, 1450)
	created := s.Accept(token, "label:4711:1:v1", body)
	require.Equal(t, "succeeded", string(s.Final(token, created.ID).Status))
	replay := s.Create(token, "label:4711:1:v1", body, "X-Request-Id", "replay-1")
	require.Equal(t, http.StatusCreated, replay.Status, string(replay.Body))
	require.Equal(t, http.StatusBadRequest, s.Create(token, "label:4711:2:v1", []byte(`{"parcel":`)).Status)
	require.Equal(t, http.StatusUnauthorized, s.Create("not-a-token", "label:4711:3:v1", body).Status)

	// A job of a kind no worker runs: River itself logs an error about it.
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = inserter.Insert(ctx, unknownKind{}, &river.InsertOpts{Queue: jobs.QueueLabels})
	require.NoError(t, err)
	_, err = worker.WaitLine(ctx, func(l proc.Line) bool { return l.Field("kind") == "no_such_kind" })
	require.NoError(t, err, "River's line about the job")

	invoice := filepath.Join(t.TempDir(), "invoice.csv")
	require.NoError(t, os.WriteFile(invoice, []byte("invoice_no,line_no,billed_at,carrier_label_id,tracking_no,idempotency_key,reference,cost_cents,currency\n"), 0o644))
	res, err := f.Command(ctx, "reconcile", nil, "--invoice", invoice)
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)

	require.NoError(t, f.Stop(ctx).Err())

	mu.Lock()
	defer mu.Unlock()
	counts := map[string]int{}
	var buyLines, riverJobLines, createLines int
	var logged strings.Builder
	for _, nl := range lines {
		service, command, _ := strings.Cut(nl.name, " ")
		if command != "" && nl.line.Stream == proc.Stdout {
			continue // a command's output (a token, a report), not its log
		}
		m := checkLogLine(t, service, nl.line)
		if m == nil {
			continue
		}
		counts[service]++
		logged.WriteString(nl.line.Text + "\n")
		msg := m["message"].(string)
		_, hasJobID := m["job_id"].(float64)
		switch {
		case service == "worker" && (strings.HasSuffix(msg, " attempt") || m["job_kind"] != nil || m["job_attempt"] != nil):
			if !hasJobID {
				t.Errorf("worker: a line about a job without job_id: %s", nl.line.Text)
			}
			if msg == "buy_label attempt" {
				buyLines++
				for _, k := range []string{"request_id", "caller", "job_kind"} {
					if s, _ := m[k].(string); s == "" {
						t.Errorf("worker: buy_label attempt without %s: %s", k, nl.line.Text)
					}
				}
			}
		case service == "worker" && m["kind"] == "no_such_kind":
			riverJobLines++
			if !hasJobID {
				t.Errorf("worker: River's line about a job without job_id: %s", nl.line.Text)
			}
		case service == "api" && msg == "request":
			if s, _ := m["http_request_id"].(string); s == "" {
				t.Errorf("api: a request line without http_request_id: %s", nl.line.Text)
			}
			if m["status"] != float64(http.StatusUnauthorized) && m["route"] != "ops" {
				if s, _ := m["caller"].(string); s != "shop" {
					t.Errorf("api: an authenticated request line without caller: %s", nl.line.Text)
				}
			}
			if m["route"] == "create_label" && m["status"] != float64(http.StatusBadRequest) && m["status"] != float64(http.StatusUnauthorized) {
				createLines++
				if m["request_id"] != created.ID {
					t.Errorf("api: a create line without the label request's request_id: %s", nl.line.Text)
				}
			}
		}
	}
	t.Logf("lines checked, by process: %v", counts)
	for _, service := range []string{"api", "worker", "carrier", "reconcile"} {
		require.NotZero(t, counts[service], "no log line of %s", service)
	}
	require.NotZero(t, buyLines, "a buy_label attempt line")
	require.NotZero(t, riverJobLines, "River's line about the unknown job")
	require.Equal(t, 2, createLines, "the create and its replay")
	require.NotContains(t, logged.String(), token, "a token in the log")
}

type unknownKind struct{}

func (unknownKind) Kind() string { return "no_such_kind" }

// Every duration a line of the service writes (zerolog's Dur, in
// milliseconds) is named NAME_ms, the lines no test above provokes too (a
// lost notification connection, clock skew).
func TestDurationFieldsNameTheirUnit(t *testing.T) {
	t.Parallel()
	dur := regexp.MustCompile(`\.Dur\("([^"]*)"`)
	var found int
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range dur.FindAllSubmatch(src, -1) {
			found++
			if !strings.HasSuffix(string(m[1]), "_ms") {
				t.Errorf("%s: duration field %q: name it %s_ms", path, m[1], m[1])
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, found, "no duration field found: the pattern is stale")
}
