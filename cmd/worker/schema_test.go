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

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/migrations"
)

// A database never migrated, or one migration behind: the worker stops at
// once (exit 1, one error line naming `api migrate`) instead of retrying
// River's start.
func TestSchemaBehind(t *testing.T) {
	t.Parallel()
	_, empty := dbtest.NewEmpty(t)
	_, behind := dbtest.NewBehind(t, 1)
	for _, url := range []string{empty, behind} {
		e := clitest.Env(map[string]string{"DATABASE_URL": url, "METRICS_ADDR": "127.0.0.1:0", "CARRIER_URL": "http://127.0.0.1:1"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var errb bytes.Buffer
		code := run(ctx, []string{"worker"}, e, io.Discard, &errb)
		cancel()
		require.Equal(t, 1, code, errb.String())
		var errors []string
		for line := range strings.SplitSeq(strings.TrimSpace(errb.String()), "\n") {
			require.NotContains(t, line, "river could not start")
			if strings.Contains(line, `"level":"error"`) {
				errors = append(errors, line)
			}
		}
		require.Len(t, errors, 1, errb.String())
		require.Contains(t, errors[0], "refusing to start: the database schema is behind this binary")
		require.Contains(t, errors[0], "run `api migrate`")
	}
}

// The worker's /readyz answers 503 naming `api migrate` while the schema
// is behind.
func TestReadyzSchemaBehind(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewEmpty(t)
	mux := http.NewServeMux()
	handleHealth(mux, migrations.NewGate(pool))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	var body struct{ Status string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Contains(t, body.Status, "run `api migrate`")
}
