package proctest

import (
	"context"
	"testing"
	"time"
)

// StopTimeout is how long [StartT]'s cleanup waits after SIGTERM before it
// sends SIGKILL: above the worker's longest graceful stop with test settings.
const StopTimeout = 60 * time.Second

// BuildT builds pkgs (./cmd/... when none) into the test's temporary
// directory, and fails the test when the build fails.
func BuildT(tb testing.TB, pkgs ...string) *Binaries {
	tb.Helper()
	b, err := Build(tb.Context(), &BuildOpts{OutDir: tb.TempDir(), Packages: pkgs})
	if err != nil {
		tb.Fatalf("proctest: %v", err)
	}
	return b
}

// StartT starts the executable at path for the length of the test. When the
// test ends, a process still running gets SIGTERM and must exit with status 0
// or the test fails (a process the test killed or that exited on its own is
// left alone); when the test has failed, the last lines of the process are
// logged.
func StartT(tb testing.TB, path string, o *Opts) *Process {
	tb.Helper()
	// Not tb.Context(): it ends before the cleanups run, and the processes
	// would all get SIGTERM at once instead of in the cleanups' order.
	p, err := Start(context.Background(), path, o)
	if err != nil {
		tb.Fatalf("proctest: %v", err)
	}
	tb.Cleanup(func() {
		if !p.Exited() {
			ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
			defer cancel()
			if err := p.Stop(ctx); err != nil {
				tb.Errorf("proctest: stopping %s: %v", p.Name(), err)
			}
		}
		if tb.Failed() {
			tb.Logf("proctest: %s (pid %d) exit code %d; last output:\n%s", p.Name(), p.Pid(), p.ExitCode(), p.Tail(TailLines))
		}
	})
	return p
}
