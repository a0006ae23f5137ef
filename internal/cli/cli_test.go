package cli

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A *_BATCH of 0 turns the shared statements off; any other value is the
// batch size the libraries take as it is.
func TestBatch(t *testing.T) {
	require.Equal(t, -1, Batch(0))
	require.Equal(t, 64, Batch(64))
	require.Equal(t, 1, Batch(1))
}

// DATABASE_URL wins; without it, PGHOST or PGDATABASE leave the connection to
// pgx's own PG* variables; without either, the spec's default.
func TestDatabaseURL(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DATABASE_URL": "postgres://db/x", "PGHOST": "h"}, "postgres://db/x"},
		{map[string]string{"PGHOST": "h"}, ""},
		{map[string]string{"PGDATABASE": "x"}, ""},
		{map[string]string{"PGUSER": "u"}, "postgres://localhost:5432/labels?sslmode=disable"},
		{nil, "postgres://localhost:5432/labels?sslmode=disable"},
	} {
		e := &Env{Getenv: func(k string) string { return tc.env[k] }}
		require.Equal(t, tc.want, e.DatabaseURL(), "%v", tc.env)
	}
}

// DATABASE_POOLED defaults to whether DATABASE_DIRECT_URL is set; a bad
// value is remembered; a DATABASE_DIRECT_URL that does not parse is one
// line naming it.
func TestDatabase(t *testing.T) {
	for _, tc := range []struct {
		env    map[string]string
		pooled bool
	}{
		{nil, false},
		{map[string]string{"DATABASE_DIRECT_URL": "postgres://db:5432/x"}, true},
		{map[string]string{"DATABASE_DIRECT_URL": "postgres://db:5432/x", "DATABASE_POOLED": "false"}, false},
		{map[string]string{"DATABASE_POOLED": "true"}, true},
	} {
		e := &Env{Getenv: func(k string) string { return tc.env[k] }}
		d := e.Database()
		require.NoError(t, e.Err)
		require.Equal(t, tc.pooled, d.Pooled, "%v", tc.env)
		require.Equal(t, tc.env["DATABASE_DIRECT_URL"], d.DirectURL)
	}
	e := &Env{Getenv: func(k string) string { return map[string]string{"DATABASE_POOLED": "perhaps"}[k] }}
	e.Database()
	require.ErrorContains(t, e.Err, "DATABASE_POOLED")

	var errb strings.Builder
	e = &Env{Getenv: func(string) string { return "" }}
	_, ok := Endpoints("x", e, func() error { return nil }, Database{URL: "postgres://a/b", DirectURL: "::bad"}, &errb)
	require.False(t, ok)
	require.True(t, strings.HasPrefix(errb.String(), "x: DATABASE_DIRECT_URL: "), errb.String())
	errb.Reset()
	_, ok = Endpoints("x", e, func() error { return nil }, Database{URL: "::bad"}, &errb)
	require.False(t, ok)
	require.True(t, strings.HasPrefix(errb.String(), "x: DATABASE_URL: "), errb.String())
}

// operations.md: on SIGTERM or SIGINT a binary stops taking new work. The
// first of either cancels the context; a second calls onSecond. (Not
// parallel: signals go to the whole test process.)
func TestSignalContext(t *testing.T) {
	for _, sigs := range [][2]syscall.Signal{{syscall.SIGINT, syscall.SIGTERM}, {syscall.SIGTERM, syscall.SIGINT}} {
		parent, stopParent := context.WithCancel(context.Background())
		second := make(chan struct{})
		ctx, cancel := SignalContext(parent, func() { close(second) })
		require.NoError(t, syscall.Kill(os.Getpid(), sigs[0]))
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%v did not cancel the context", sigs[0])
		}
		require.NoError(t, syscall.Kill(os.Getpid(), sigs[1]))
		select {
		case <-second:
		case <-time.After(10 * time.Second):
			t.Fatalf("a second signal (%v) did not call onSecond", sigs[1])
		}
		cancel()
		stopParent()
	}
}
