// Package proctest ties the project's real binaries, started by
// internal/proc and internal/fleet, to a test: built into the test's
// temporary directory, stopped when the test ends (a non-zero exit on that
// SIGTERM fails the test), and their last lines logged when it failed.
package proctest

import (
	"context"
	"testing"
	"time"

	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/proc"
)

// StopTimeout is how long the cleanups wait after SIGTERM before they send
// SIGKILL: above the worker's longest graceful stop with test settings.
const StopTimeout = 60 * time.Second

// BuildT builds pkgs (./cmd/... when none) into the test's temporary
// directory, and fails the test when the build fails.
func BuildT(tb testing.TB, pkgs ...string) *proc.Binaries {
	tb.Helper()
	b, err := proc.Build(tb.Context(), &proc.BuildOpts{OutDir: tb.TempDir(), Packages: pkgs})
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
func StartT(tb testing.TB, path string, o *proc.Opts) *proc.Process {
	tb.Helper()
	// Not tb.Context(): it ends before the cleanups run, and the processes
	// would all get SIGTERM at once instead of in the cleanups' order.
	p, err := proc.Start(context.Background(), path, o)
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
			tb.Logf("proctest: %s (pid %d) exit code %d; last output:\n%s", p.Name(), p.Pid(), p.ExitCode(), p.Tail(proc.TailLines))
		}
	})
	return p
}

// Fleet returns a launcher whose processes live as long as the test: when
// it ends, the fleet is stopped in order (fleet.Fleet.Stop) and every
// process must exit with status 0 (one the test killed or that exited on its
// own is left alone); when the test has failed, the last lines of every
// process are logged.
func Fleet(tb testing.TB, cfg fleet.Config) *fleet.Fleet {
	tb.Helper()
	if cfg.Grace <= 0 {
		cfg.Grace = StopTimeout
	}
	f := fleet.New(cfg)
	tb.Cleanup(func() {
		for _, st := range f.Stop(context.Background()) {
			if st.Err != nil {
				tb.Errorf("proctest: stopping %s: %v", st.Name, st.Err)
			}
		}
		if tb.Failed() {
			for _, p := range f.Procs() {
				tb.Logf("proctest: %s (pid %d) exit code %d; last output:\n%s", p.Name(), p.Pid(), p.ExitCode(), p.Tail(proc.TailLines))
			}
		}
	})
	return f
}
