package proc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/proc"
	"github.com/labelkit/labels/internal/testutil/proctest"
)

// The test binary doubles as the child process: with PROCTEST_HELPER set it
// plays one of the roles below instead of running the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("PROCTEST_HELPER"); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

func helper(mode string) int {
	switch mode {
	case "serve", "serve-text":
		// A server like cmd/api: logs its address, answers /healthz, exits 0
		// on SIGTERM.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintln(os.Stderr, `{"level":"info","msg":"metrics listening","addr":"127.0.0.1:1"}`)
		if mode == "serve" {
			fmt.Fprintf(os.Stderr, `{"level":"info","service":"helper","addr":%q,"msg":"listening"}`+"\n", ln.Addr())
		} else {
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			fmt.Fprintf(os.Stderr, "carrier simulator listening on [::]:%s\n", port)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
		go func() { _ = http.Serve(ln, mux) }()
		<-sig
		fmt.Fprintln(os.Stderr, `{"level":"info","msg":"stopped"}`)
		return 0
	case "stubborn":
		// Ignores SIGTERM, as a stuck process would.
		signal.Ignore(syscall.SIGTERM)
		fmt.Fprintln(os.Stderr, "ready")
		time.Sleep(time.Hour)
		return 0
	case "fail":
		fmt.Println("caller demo: new token")
		fmt.Println("tok_secret")
		fmt.Fprintln(os.Stderr, "something broke")
		fmt.Print("last words without a newline")
		return 3
	case "count":
		// 1,000 numbered lines, then the last one, then waits for SIGTERM.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		for i := range 1000 {
			fmt.Println("line", i)
		}
		fmt.Println("last")
		<-sig
		return 0
	case "env":
		for _, k := range []string{"LOG_FORMAT", "PROCTEST_SET", "PATH"} {
			v, ok := os.LookupEnv(k)
			fmt.Printf("%s=%v:%s\n", k, ok, v)
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

func helperOpts(mode string, env ...string) *proc.Opts {
	return &proc.Opts{Name: "helper-" + mode, Env: append([]string{"PROCTEST_HELPER=" + mode}, env...)}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serve starts the helper in mode and waits until it says it listens.
func serve(t *testing.T, mode string) (context.Context, *proc.Process, string) {
	t.Helper()
	ctx := testContext(t)
	p := proctest.StartT(t, os.Args[0], helperOpts(mode))
	addr, err := p.WaitListening(ctx, "listening")
	require.NoError(t, err)
	return ctx, p, addr
}

func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	ctx, p, addr := serve(t, "serve")
	require.NotEqual(t, "127.0.0.1:1", addr, "the metrics line must not match the message listening")
	require.NoError(t, p.WaitHealthy(ctx, "http://"+addr))
	require.NoError(t, proc.WaitHealthy(ctx, addr), "a bare host:port works too")

	require.NoError(t, p.Stop(ctx))
	require.True(t, p.Exited())
	require.Equal(t, 0, p.ExitCode())
	require.Contains(t, p.Output(proc.Stderr), `"msg":"stopped"`)
	require.NoError(t, p.Stop(ctx), "stopping again reports the same clean exit")
}

func TestPlainTextListenLine(t *testing.T) {
	t.Parallel()
	ctx, p, addr := serve(t, "serve-text")
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), "[::] is dialled as 127.0.0.1, got %s", addr)
	require.NoError(t, p.WaitHealthy(ctx, addr))
}

func TestStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p, err := proc.Start(ctx, os.Args[0], helperOpts("stubborn"))
	require.NoError(t, err)
	_, err = p.WaitLine(ctx, func(l proc.Line) bool { return l.Text == "ready" })
	require.NoError(t, err)

	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = p.Stop(sctx)
	require.ErrorContains(t, err, "did not exit after SIGTERM")
	require.ErrorContains(t, err, "signal: killed")
	require.Equal(t, -1, p.ExitCode())
}

func TestKill(t *testing.T) {
	t.Parallel()
	ctx, p, _ := serve(t, "serve")
	require.NoError(t, p.Kill())
	require.Equal(t, -1, p.ExitCode())
	require.ErrorIs(t, p.Signal(syscall.SIGTERM), os.ErrProcessDone)
	var exit *proc.ExitError
	require.ErrorAs(t, p.Wait(ctx), &exit)
	require.Contains(t, exit.Error(), "signal: killed")
}

func TestContextEndStopsGracefully(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testContext(t))
	p, err := proc.Start(ctx, os.Args[0], helperOpts("serve"))
	require.NoError(t, err)
	_, err = p.WaitListening(ctx, "listening")
	require.NoError(t, err)
	cancel()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the process outlived its context")
	}
	require.Equal(t, 0, p.ExitCode(), "SIGTERM, not SIGKILL")
	require.NoError(t, p.Wait(context.Background()))
}

func TestRunReportsExitAndOutput(t *testing.T) {
	t.Parallel()
	res, err := proc.Run(testContext(t), os.Args[0], helperOpts("fail"))
	var exit *proc.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 3, exit.ExitCode())
	require.Contains(t, exit.Error(), "exit status 3")
	require.Contains(t, exit.Error(), "something broke")
	require.Equal(t, 3, res.ExitCode)
	require.Equal(t, "something broke\n", res.Stderr)
	require.Equal(t, "last words without a newline", res.LastLine(), "a last line without newline is kept")
	require.Contains(t, res.Stdout, "tok_secret\n")
}

func TestWaitFailsWhenTheProcessExits(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p, err := proc.Start(ctx, os.Args[0], helperOpts("fail"))
	require.NoError(t, err)
	_, err = p.WaitListening(ctx, "listening")
	require.ErrorContains(t, err, "exit status 3")
	require.ErrorContains(t, err, "something broke")
	require.Error(t, p.WaitHealthy(ctx, "127.0.0.1:1"))
}

func TestWaitLineHonoursContext(t *testing.T) {
	t.Parallel()
	// Once it listens, the helper has installed its SIGTERM handler, so the
	// test's cleanup stops it cleanly however early it runs.
	_, p, _ := serve(t, "serve")
	ctx, cancel := context.WithTimeout(testContext(t), 200*time.Millisecond)
	defer cancel()
	_, err := p.WaitLine(ctx, func(proc.Line) bool { return false })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, p.Exited())
}

func TestEnvironment(t *testing.T) {
	// t.Setenv: not parallel.
	t.Setenv("LOG_FORMAT", "console")
	ctx := testContext(t)

	res, err := proc.Run(ctx, os.Args[0], helperOpts("env", "PROCTEST_SET=yes"))
	require.NoError(t, err)
	require.Contains(t, res.Stdout, "LOG_FORMAT=false:\n", "a variable that configures the binaries is not inherited")
	require.Contains(t, res.Stdout, "PROCTEST_SET=true:yes\n")
	require.Contains(t, res.Stdout, "PATH=true:"+os.Getenv("PATH")+"\n")

	res, err = proc.Run(ctx, os.Args[0], helperOpts("env", "LOG_FORMAT=json"))
	require.NoError(t, err)
	require.Contains(t, res.Stdout, "LOG_FORMAT=true:json\n", "Opts.Env wins")

	o := helperOpts("env")
	o.InheritEnv = true
	res, err = proc.Run(ctx, os.Args[0], o)
	require.NoError(t, err)
	require.Contains(t, res.Stdout, "LOG_FORMAT=true:console\n")
}

func TestOnLineSeesEveryLine(t *testing.T) {
	t.Parallel()
	var got []string
	o := helperOpts("fail")
	o.OnLine = func(l proc.Line) { got = append(got, string(l.Stream)+": "+l.Text) }
	_, err := proc.Run(testContext(t), os.Args[0], o)
	require.Error(t, err)
	require.ElementsMatch(t, []string{
		"stdout: caller demo: new token",
		"stdout: tok_secret",
		"stderr: something broke",
		"stdout: last words without a newline",
	}, got)
}

func TestListenAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text, msg, want string
	}{
		{`{"level":"info","addr":"127.0.0.1:41234","msg":"listening"}`, "listening", "127.0.0.1:41234"},
		{`{"msg":"metrics listening","addr":"127.0.0.1:9091"}`, "listening", ""},
		{`{"msg":"metrics listening","addr":"127.0.0.1:9091"}`, "metrics listening", "127.0.0.1:9091"},
		{`{"message":"listening","address":"[::]:8090"}`, "listening", "127.0.0.1:8090"},
		{`{"msg":"listening","addr":"http://localhost:8090/"}`, "listening", "localhost:8090"},
		{`{"msg":"listening"}`, "listening", ""},
		{`{"msg":"listening","addr":"127.0.0.1:0"}`, "listening", ""},
		{`carrier: listening on :8090`, "listening", "127.0.0.1:8090"},
		{`2026/12/02 10:00:00 listening on http://[::1]:8090`, "listening", "[::1]:8090"},
		{`10:00:00 INF listening addr=0.0.0.0:8090`, "listening", "127.0.0.1:8090"},
		{`starting up on 127.0.0.1:8090`, "listening", ""},
	} {
		got, ok := proc.ListenAddr(proc.Line{Text: tc.text}, tc.msg)
		require.Equal(t, tc.want != "", ok, tc.text)
		require.Equal(t, tc.want, got, tc.text)
	}
}

func TestBuild(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	b := proctest.BuildT(t, "./internal/proc/testdata/hello")
	require.True(t, b.Has("hello"))
	require.False(t, b.Has("api"))
	res, err := proc.Run(ctx, b.Path("hello"), nil)
	require.NoError(t, err)
	require.Equal(t, "hello from "+b.Path("hello"), res.LastLine())

	_, err = proc.Build(ctx, &proc.BuildOpts{Packages: []string{"./internal/proc/testdata/nosuch"}})
	require.Error(t, err)

	tmp, err := proc.Build(ctx, &proc.BuildOpts{Packages: []string{"./internal/proc/testdata/hello"}})
	require.NoError(t, err)
	require.True(t, tmp.Has("hello"))
	require.NoError(t, tmp.Remove())
	_, err = os.Stat(tmp.Dir)
	require.True(t, errors.Is(err, os.ErrNotExist), "Remove deletes the directory Build made")
}

// With KeepLines, only the recent lines are kept, and a line that arrived
// after many others is still found; OnLine sees every line.
func TestKeepLines(t *testing.T) {
	t.Parallel()
	o := helperOpts("count")
	o.KeepLines = 10
	seen := 0
	o.OnLine = func(proc.Line) { seen++ }
	p, err := proc.Start(testContext(t), os.Args[0], o)
	require.NoError(t, err)
	l, err := p.WaitLine(testContext(t), func(l proc.Line) bool { return l.Text == "last" })
	require.NoError(t, err)
	require.Equal(t, "last", l.Text)
	lines := p.Lines()
	require.GreaterOrEqual(t, len(lines), 10)
	require.Less(t, len(lines), 20)
	require.Equal(t, "last", lines[len(lines)-1].Text)
	require.Equal(t, "line 999", lines[len(lines)-2].Text)
	require.NoError(t, p.Stop(testContext(t)))
	require.Equal(t, 1001, seen)
}

// LastLines keeps the last n lines of an output, trimmed, on one line.
func TestLastLines(t *testing.T) {
	t.Parallel()
	require.Equal(t, "c | d", proc.LastLines("a\nb\nc\nd\n", 2))
	require.Equal(t, "a | b", proc.LastLines("\na\nb\n\n", 5))
	require.Empty(t, proc.LastLines("", 3))
}
