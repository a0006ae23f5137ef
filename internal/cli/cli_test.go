package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
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

// exitedChild runs this test binary again for test alone, with CLI_CHILD
// set to test (the test then does what exits the process), and returns the
// child's combined output and exit status.
func exitedChild(t *testing.T, test string) (out string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), "CLI_CHILD="+test)
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", b)
	return string(b), exit.ExitCode()
}

// Exit hands run the process's arguments, environment and output, and exits
// with what run returns (checked in a child process, this test binary again).
func TestExit(t *testing.T) {
	if os.Getenv("CLI_CHILD") == "TestExit" {
		Exit(func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
			fmt.Fprintf(stdout, "%s %s|", args[1], getenv("CLI_CHILD"))
			fmt.Fprint(stderr, "to stderr")
			return 4
		})
	}
	out, code := exitedChild(t, "TestExit")
	require.Equal(t, 4, code, out)
	require.Equal(t, "-test.run=^TestExit$ TestExit|to stderr", out)
}

// A service's first signal cancels its context; the second logs one line
// and exits with status 1, so it runs in a child process (this test binary
// again).
func TestServiceContext(t *testing.T) {
	if os.Getenv("CLI_CHILD") == "TestServiceContext" {
		ctx, _ := ServiceContext(context.Background(), zerolog.New(os.Stderr))
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		<-ctx.Done()
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		time.Sleep(time.Minute)
		os.Exit(3)
	}
	out, code := exitedChild(t, "TestServiceContext")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `"message":"second signal: exiting at once"`)
}

// Parse, ParseFlags and ParseValid print usage for --help and one line on
// stderr for a bad flag; Parse and ParseValid refuse a stray argument,
// ParseFlags leaves it to the command; ParseValid then refuses what validate
// refuses.
func TestParse(t *testing.T) {
	t.Parallel()
	type parser func(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool)
	parse := func(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
		return Parse(fs, args, "usage\n", stdout, stderr)
	}
	flagsOnly := func(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
		return ParseFlags(fs, args, "usage\n", stdout, stderr)
	}
	atMost3 := func(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
		validate := func() error {
			if n := fs.Lookup("n").Value.(flag.Getter).Get().(int); n > 3 {
				return fmt.Errorf("--n %d: at most 3", n)
			}
			return nil
		}
		return ParseValid(fs, args, "usage\n", validate, stdout, stderr)
	}
	for _, tc := range []struct {
		parse          parser
		args           []string
		code           int
		ok             bool
		rest           []string // fs.Args() when ok
		stdout, stderr string
	}{
		{parse, []string{"--n", "3"}, 0, true, []string{}, "", ""},
		{parse, []string{"--help"}, 0, false, nil, "usage\n", ""},
		{parse, []string{"--n", "x"}, 2, false, nil, "", "tool: invalid value \"x\" for flag -n: parse error\n"},
		{parse, []string{"--nope"}, 2, false, nil, "", "tool: flag provided but not defined: -nope\n"},
		{parse, []string{"--n", "3", "now", "later"}, 2, false, nil, "", "tool: unexpected arguments [\"now\" \"later\"]; see tool --help\n"},
		{flagsOnly, []string{"--n", "3", "migrate"}, 0, true, []string{"migrate"}, "", ""},
		{flagsOnly, []string{"--help"}, 0, false, nil, "usage\n", ""},
		{atMost3, []string{"--n", "3"}, 0, true, []string{}, "", ""},
		{atMost3, []string{"--n", "4"}, 2, false, nil, "", "tool: --n 4: at most 3\n"},
		{atMost3, []string{"--n", "3", "x"}, 2, false, nil, "", "tool: unexpected arguments [\"x\"]; see tool --help\n"},
	} {
		fs := flag.NewFlagSet("tool", flag.ContinueOnError)
		n := fs.Int("n", 1, "")
		var stdout, stderr bytes.Buffer
		code, ok := tc.parse(fs, tc.args, &stdout, &stderr)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Equal(t, tc.ok, ok, "%v", tc.args)
		require.Equal(t, tc.stdout, stdout.String(), "%v", tc.args)
		require.Equal(t, tc.stderr, stderr.String(), "%v", tc.args)
		if ok {
			require.Equal(t, 3, *n)
			require.Equal(t, tc.rest, fs.Args(), "%v", tc.args)
		}
	}
}

func TestDur(t *testing.T) {
	for d, want := range map[time.Duration]string{24 * time.Hour: "24h", time.Minute: "1m", 30 * time.Second: "30s",
		500 * time.Millisecond: "500ms", 90 * time.Minute: "1h30m", 0: "0s", time.Hour + time.Second: "1h0m1s"} {
		require.Equal(t, want, Dur(d), d)
	}
}
