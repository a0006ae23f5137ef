package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/apiserve"
	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/postgres"
)

// requireOneLine requires s to be one line naming `api migrate` (and no SQLSTATE).
func requireOneLine(t *testing.T, s string) {
	t.Helper()
	s = strings.TrimSpace(s)
	require.NotContains(t, s, "\n", "one line: %q", s)
	require.Contains(t, s, "run `api migrate`")
	require.NotContains(t, s, "SQLSTATE")
}

// A database never migrated, or one migration behind: the API refuses to
// start (exit 1, one line naming `api migrate`), and so do `api caller add`
// and `api webhook`; `api migrate` fixes it.
func TestSchemaBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty, emptyURL := dbtest.NewEmpty(t)
	_, migratedURL := dbtest.NewBehind(t, 1)
	for name, url := range map[string]string{"never migrated": emptyURL, "one behind": migratedURL} {
		e := clitest.Env(map[string]string{"DATABASE_URL": url, "API_ADDR": "127.0.0.1:0"})
		var errb bytes.Buffer
		// Bounded: an API that served anyway would stop (exit 0) at the deadline.
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		code := run(sctx, []string{"api"}, e, io.Discard, &errb)
		cancel()
		require.Equal(t, 1, code, name)
		requireOneLine(t, errb.String())
		require.Contains(t, errb.String(), "refusing to start")
		for prefix, args := range map[string][]string{"api caller add": {"api", "caller", "add", "fulfilment"}, "api webhook": {"api", "webhook", "list"}} {
			errb.Reset()
			require.Equal(t, 1, run(ctx, args, e, io.Discard, &errb), "%s: %s", name, args)
			requireOneLine(t, errb.String())
			require.True(t, strings.HasPrefix(errb.String(), prefix+": the database schema is behind"), errb.String())
		}
		require.Equal(t, 0, run(ctx, []string{"api", "migrate"}, e, io.Discard, io.Discard), name)
		require.Equal(t, 0, run(ctx, []string{"api", "caller", "add", "fulfilment"}, e, io.Discard, io.Discard), name)
	}
	var n int
	require.NoError(t, empty.QueryRow(ctx, `SELECT count(*) FROM callers`).Scan(&n))
	require.Equal(t, 1, n)
}

// /readyz of an API whose schema is behind (the database was away when it
// started) answers 503 naming `api migrate`, while the ping succeeds.
func TestReadyzSchemaBehind(t *testing.T) {
	t.Parallel()
	_, url := dbtest.NewEmpty(t)
	db, err := postgres.ParseEndpoints(url, "", false)
	require.NoError(t, err)
	svc, err := apiserve.Start(t.Context(), db, apiserve.Options{KeyRetention: 1e12}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	srv := httptest.NewServer(svc.Handler)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var problem struct{ Code, Detail string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&problem))
	require.Equal(t, "store_unavailable", problem.Code)
	require.Contains(t, problem.Detail, "run `api migrate`")
}

// A database that does not answer: one line naming the host and the
// database it tried, never the password.
func TestConnectionErrorNamesHost(t *testing.T) {
	t.Parallel()
	e := clitest.Env(map[string]string{"DATABASE_URL": "postgres://bob:s3cr3t-pw@127.0.0.1:1/labels_x?sslmode=disable&connect_timeout=2"})
	for _, args := range [][]string{{"api", "caller", "add", "fulfilment"}, {"api", "webhook", "list"}} {
		var errb bytes.Buffer
		require.Equal(t, 1, run(context.Background(), args, e, io.Discard, &errb), args)
		line := strings.TrimSpace(errb.String())
		require.NotContains(t, line, "\n")
		require.Contains(t, line, "127.0.0.1:1")
		require.Contains(t, line, "database=labels_x")
		require.NotContains(t, line, "s3cr3t-pw")
	}
}
