package cli

import (
	"context"
	"os"
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
