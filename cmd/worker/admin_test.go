package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/proc"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/internal/testutil/proctest"
	"github.com/labelkit/labels/jobs"
)

func TestAdminConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr, user, password string
		want                 string // part of the error; "" for none
	}{
		{"", "", "", ""},
		{"", "admin", "", ""},
		{"127.0.0.1:0", "admin", "s3cret-long", ""},
		{"127.0.0.1:0", "", "s3cret-long", "needs ADMIN_USER and ADMIN_PASSWORD"},
		{"127.0.0.1:0", "admin", "", "needs ADMIN_USER and ADMIN_PASSWORD"},
		{"127.0.0.1:0", "ad:min", "s3cret-long", "must not contain ':'"},
	} {
		err := validateAdmin(c.addr, c.user, c.password)
		if c.want == "" {
			require.NoError(t, err, c)
			continue
		}
		require.ErrorContains(t, err, c.want, c)
		// serveAdmin refuses the same configuration before it listens.
		srv, err := serveAdmin(t.Context(), c.addr, c.user, c.password, nil, nil, zerolog.Nop())
		require.ErrorContains(t, err, c.want)
		require.Nil(t, srv)
	}
	srv, err := serveAdmin(t.Context(), "", "", "", nil, nil, zerolog.Nop())
	require.NoError(t, err)
	require.Nil(t, srv, "off by default")
}

// startAdmin serves the admin listener on a free port over pool and returns
// its base URL.
func startAdmin(t *testing.T, pool *pgxpool.Pool, user, password string, log zerolog.Logger) string {
	t.Helper()
	// The admin process needs no workers of its own: an insert-only client.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	srv, err := serveAdmin(t.Context(), "127.0.0.1:0", user, password, client, pool, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + srv.Addr
}

func get(t *testing.T, u, user, password string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	if user != "" || password != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// Everything under /riverui/ needs the credentials; the probes do not.
func TestAdminBasicAuth(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	var logs logtest.Buffer
	base := startAdmin(t, pool, "operator", "correct horse", zerolog.New(&logs))
	require.Contains(t, logs.String(), `"message":"admin listening"`)
	require.Contains(t, logs.String(), strings.TrimPrefix(base, "http://"))

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	_, err = client.Insert(context.Background(), jobs.BuyLabelArgs{RequestID: "lr_admin_test"}, nil)
	require.NoError(t, err)

	for _, path := range []string{"/riverui/", "/riverui/jobs", "/riverui/api/jobs?state=available", "/debug/pprof/", "/debug/pprof/goroutine?debug=1"} {
		for _, c := range []struct{ user, password string }{
			{"", ""}, {"operator", ""}, {"operator", "Wr0ngPassw0rd"}, {"someone", "correct horse"}, {"operator", "correct horse "},
		} {
			resp, _ := get(t, base+path, c.user, c.password)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %v", path, c)
			require.Equal(t, `Basic realm="labels admin", charset="UTF-8"`, resp.Header.Get("WWW-Authenticate"))
		}
	}
	require.Contains(t, logs.String(), `"user":"someone"`)
	require.NotContains(t, logs.String(), "Wr0ngPassw0rd", "a password is never logged")

	resp, body := get(t, base+"/riverui/", "operator", "correct horse")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	require.Contains(t, string(body), "<div id=\"root\"")

	resp, body = get(t, base+"/debug/pprof/goroutine?debug=1", "operator", "correct horse")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "goroutine profile:", "the worker's profiles are served to the operator")

	resp, body = get(t, base+"/riverui/api/jobs?state=available", "operator", "correct horse")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"kind":"buy_label"`)
	require.Contains(t, string(body), "lr_admin_test")

	resp, _ = get(t, base+"/", "", "")
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, "/riverui/", resp.Header.Get("Location"))
	resp, _ = get(t, base+"/healthz", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get(t, base+"/readyz", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// chromium returns the path of Debian's chromium, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed: `go tool task test` installs it (apt-get install -y chromium); skipping the River UI browser test")
	return ""
}

// runChromium runs headless Chromium with args after the common flags, and
// returns what it printed on stdout.
func runChromium(t *testing.T, browser string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(), "--window-size=1400,900",
		// Timers run on virtual time, which waits for the page's fetches.
		"--virtual-time-budget=15000",
	}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chromium: %s", stderr.String())
	return stdout.String()
}

// fleet is a running set of the project's binaries against one database.
type fleet struct {
	dbURL, api string
	token      string
}

// startFleet builds the binaries and starts the carrier simulator, the API and
// n workers against a fresh database, each on a free loopback port.
func startFleet(t *testing.T, n int) *fleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bins := proctest.BuildT(t, "./cmd/api", "./cmd/worker", "./cmd/carrier")
	_, dbURL := dbtest.New(t)
	f := &fleet{dbURL: dbURL}

	carrierProc := proctest.StartT(t, bins.Path("carrier"), &proc.Opts{Env: []string{"CARRIER_ADDR=127.0.0.1:0"}})
	carrierAddr, err := carrierProc.WaitListening(ctx, "listening")
	require.NoError(t, err)

	res, err := proc.Run(ctx, bins.Path("api"), &proc.Opts{Args: []string{"caller", "add", "ui-test"}, Env: []string{"DATABASE_URL=" + dbURL}})
	require.NoError(t, err)
	f.token = res.LastLine()

	api := proctest.StartT(t, bins.Path("api"), &proc.Opts{Env: []string{"DATABASE_URL=" + dbURL, "API_ADDR=127.0.0.1:0"}})
	apiAddr, err := api.WaitListening(ctx, "listening")
	require.NoError(t, err)
	require.NoError(t, api.WaitHealthy(ctx, apiAddr))
	f.api = "http://" + apiAddr

	for i := range n {
		w := proctest.StartT(t, bins.Path("worker"), &proc.Opts{
			Name: fmt.Sprintf("worker-%d", i+1),
			Env: []string{"DATABASE_URL=" + dbURL, "CARRIER_URL=http://" + carrierAddr, "METRICS_ADDR=127.0.0.1:0",
				"WORKER_CONCURRENCY=4", "CARRIER_TIMEOUT=5s", "LEASE_DURATION=10s"},
		})
		addr, err := w.WaitListening(ctx, "metrics listening")
		require.NoError(t, err)
		require.NoError(t, w.WaitHealthy(ctx, addr))
	}
	return f
}

// createLabel posts a label request and returns its id.
func (f *fleet) createLabel(t *testing.T, key string, order int) string {
	t.Helper()
	body := fmt.Sprintf(`{"order_id":%d,"parcel_no":1,"weight_g":1450,"service":"ground","ship_to":{"name":"A. Example","line1":"1 Example Street","city":"Exampleton","postal_code":"10115","country":"DE"}}`, order)
	req, err := http.NewRequest(http.MethodPost, f.api+"/v1/labels", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var lr struct {
		ID string `json:"id"`
	}
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&lr))
	return lr.ID
}

// waitSucceeded polls a label request until it succeeded.
func (f *fleet) waitSucceeded(t *testing.T, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodGet, f.api+"/v1/label-requests/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+f.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var lr struct {
			Status string `json:"status"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&lr)
		return lr.Status == "succeeded"
	}, 60*time.Second, 50*time.Millisecond, "label request %s did not succeed", id)
}

// An operator opens the River UI in a browser against a running fleet and
// sees the label jobs the fleet ran.
func TestAdminUIListsLabelJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the fleet; skipped with -short")
	}
	t.Parallel()
	browser := chromium(t)
	f := startFleet(t, 2)
	var ids []string
	for i := range 3 {
		ids = append(ids, f.createLabel(t, fmt.Sprintf("label:ui:%d", i), 7000+i))
	}
	for _, id := range ids {
		f.waitSucceeded(t, id)
	}

	pool, err := pgxpool.New(t.Context(), f.dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var logs logtest.Buffer
	base := startAdmin(t, pool, "operator", "correct horse", zerolog.New(&logs))

	// Headless Chromium cannot answer a basic-auth prompt, and a page loaded
	// from a URL with credentials may not fetch() relative URLs; so the browser
	// goes through a proxy that adds the operator's credentials, as a browser
	// does once the operator has typed them.
	target, err := url.Parse(base)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	direct := proxy.Director
	proxy.Director = func(r *http.Request) {
		direct(r)
		r.SetBasicAuth("operator", "correct horse")
	}
	withCredentials := httptest.NewServer(proxy)
	t.Cleanup(withCredentials.Close)

	page := withCredentials.URL + "/riverui/jobs?state=completed"
	dom := runChromium(t, browser, "--dump-dom", page)
	if path := os.Getenv("ADMIN_UI_SCREENSHOT"); path != "" {
		// To look at what the operator sees: ADMIN_UI_SCREENSHOT=/tmp/ui.png
		runChromium(t, browser, "--screenshot="+path, page)
	}
	require.Contains(t, dom, "buy_label", "the completed label jobs are listed; logs:\n%s", logs.String())
	for _, id := range ids {
		require.Contains(t, dom, id, "each label job shows its request id")
	}

	// Without the credentials the browser gets nothing of the UI.
	denied := runChromium(t, browser, "--dump-dom", base+"/riverui/jobs?state=completed")
	require.NotContains(t, denied, "buy_label")
	require.NotContains(t, denied, ids[0])
}
