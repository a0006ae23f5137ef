package fleet_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/proc"
)

// The test binary doubles as api, worker and carrier (linked under those
// names): with FLEET_HELPER set it plays the binary its name says.
func TestMain(m *testing.M) {
	if os.Getenv("FLEET_HELPER") != "" {
		os.Exit(helper(filepath.Base(os.Args[0]), os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helper logs its listen address as the binary would, answers /healthz,
// says what its environment gave it, and exits 0 on SIGTERM, 3 on SIGUSR1
// (as a crash would). With arguments (a command) it prints a token and
// exits.
func helper(name string, args []string) int {
	if len(args) > 0 {
		fmt.Println("caller added")
		fmt.Println("tok_" + args[len(args)-1])
		return 0
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGUSR1)
	addrVar, msg := map[string]string{"api": "API_ADDR", "carrier": "CARRIER_ADDR", "worker": "METRICS_ADDR"}[name], "listening"
	if name == "worker" {
		msg = "metrics listening"
	}
	ln, err := net.Listen("tcp", os.Getenv(addrVar))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	go func() { _ = http.Serve(ln, mux) }()
	fmt.Fprintf(os.Stderr, `{"msg":"env","carrier_url":%q,"admin_addr":%q,"admin_set":%t}`+"\n",
		os.Getenv("CARRIER_URL"), os.Getenv("ADMIN_ADDR"), os.Getenv("ADMIN_ADDR") != "")
	fmt.Fprintf(os.Stderr, `{"msg":%q,"addr":%q}`+"\n", msg, ln.Addr())
	if <-sig == syscall.SIGUSR1 {
		return 3
	}
	return 0
}

func newFleet(t *testing.T, inherit bool) *fleet.Fleet {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"api", "worker", "carrier"} {
		require.NoError(t, os.Symlink(os.Args[0], filepath.Join(dir, name)))
	}
	f := fleet.New(fleet.Config{Bins: &proc.Binaries{Dir: dir}, Env: map[string]string{"FLEET_HELPER": "1"}, InheritEnv: inherit})
	t.Cleanup(func() { f.Stop(context.Background()) })
	return f
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A fleet's workers buy from its simulator and serve no admin listener
// unless their own environment says so (not this process's, though passed
// on); a killed or stopped process is no crash; Stop stops the workers
// first, then the others, the last started first, each with status 0.
func TestStartKillStop(t *testing.T) {
	t.Setenv("ADMIN_ADDR", "127.0.0.1:9")
	ctx := testContext(t)
	f := newFleet(t, true)
	tok, err := f.AddCaller(ctx, "shop", nil)
	require.NoError(t, err)
	require.Equal(t, "tok_shop", tok)

	carrier, err := f.Start(ctx, fleet.Spec{Bin: "carrier"})
	require.NoError(t, err)
	api, err := f.Start(ctx, fleet.Spec{Bin: "api"})
	require.NoError(t, err)
	require.NotEqual(t, carrier.Addr, api.Addr)
	var workers []*fleet.Proc
	for i, admin := range []string{"127.0.0.1:0", ""} {
		env := map[string]string{}
		if admin != "" {
			env["ADMIN_ADDR"] = admin
		}
		w, err := f.Start(ctx, fleet.Spec{Bin: "worker", Name: fmt.Sprintf("worker-%d", i+1), Env: env})
		require.NoError(t, err)
		l, err := w.WaitLine(ctx, func(l proc.Line) bool { return l.Msg() == "env" })
		require.NoError(t, err)
		require.Equal(t, carrier.URL(), l.Field("carrier_url"))
		require.Equal(t, admin, l.Field("admin_addr"), "ADMIN_ADDR only from the worker's own environment")
		workers = append(workers, w)
	}

	require.NoError(t, f.Kill(workers[0]))
	w3, err := f.Start(ctx, fleet.Spec{Bin: "worker", Name: "worker-3"})
	require.NoError(t, err)
	require.Len(t, f.Procs(), 5, "killed ones too")

	stops := f.Stop(ctx)
	require.NoError(t, stops.Err())
	var names []string
	for _, s := range stops {
		names = append(names, s.Name)
	}
	require.ElementsMatch(t, []string{"worker-2", "worker-3"}, names[:2], "the workers first")
	require.Equal(t, []string{"api", "carrier"}, names[2:], "then the last started first")
	require.Empty(t, f.Crashes())
	require.True(t, w3.Exited())
}

// A process that exits on its own is a crash: Wait returns it, Crashes
// describes it.
func TestCrash(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFleet(t, false)
	w, err := f.Start(ctx, fleet.Spec{Bin: "worker", Name: "worker-1"})
	require.NoError(t, err)
	require.NoError(t, w.Signal(syscall.SIGUSR1))
	err = f.Wait(ctx)
	require.ErrorContains(t, err, "worker-1")
	require.ErrorContains(t, err, "exited on its own with status 3")
	require.Len(t, f.Crashes(), 1)

	quiet, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, newFleet(t, false).Wait(quiet), "nothing crashed: nil when ctx ends")
}

// The database straight, through a pooler with LISTEN direct, or polling;
// only the servers are started.
func TestDatabaseEnv(t *testing.T) {
	t.Parallel()
	require.Equal(t, map[string]string{"DATABASE_URL": "d"}, fleet.DatabaseEnv("d", "", true))
	require.Equal(t, map[string]string{"DATABASE_URL": "p", "DATABASE_DIRECT_URL": "d"}, fleet.DatabaseEnv("d", "p", true))
	require.Equal(t, map[string]string{"DATABASE_URL": "p", "DATABASE_POOLED": "true", "DATABASE_DIRECT_URL": ""}, fleet.DatabaseEnv("d", "p", false))
	_, err := fleet.New(fleet.Config{}).Start(t.Context(), fleet.Spec{Bin: "reconcile"})
	require.ErrorContains(t, err, "not a server")
}
