// Package failovertest runs a replicated PostgreSQL formation under
// pg_auto_failover for one test (internal/failover): a monitor and two
// nodes on free loopback ports under t.TempDir, the standby synchronous
// unless [Options].Async. A test kills the primary as a lost machine would
// ([Formation.KillPrimary]), waits for the monitor's promotion
// ([Formation.WaitPrimary]), brings the old primary back as a standby
// ([Formation.Restart], [Formation.WaitHealthy]) or moves the primary on
// purpose ([Formation.Switchover]); the service reaches whichever node is
// primary through one multi-host URL ([Formation.URL]).
//
// Every method fails the test on an error, so call them from the test's
// goroutine. [Available] tells why a formation cannot run here (tests skip
// with it).
package failovertest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/labelkit/labels/internal/failover"
)

// Options tunes [Start].
type Options struct {
	// Async makes the standby asynchronous (replication-quorum false), for
	// measuring what asynchronous replication loses; the default is the
	// synchronous standby the manager sets up for two nodes.
	Async bool
	// Root is the formation's directory (created when missing); empty
	// means a new one under t.TempDir.
	Root string
}

// Node is one PostgreSQL node of the formation.
type Node = failover.Node

// timeout bounds each method's wait that takes no context.
const timeout = 2 * time.Minute

// Available is nil when pg_autoctl, the pgautofailover extension and the
// PostgreSQL server binaries are installed, and the reason otherwise.
func Available() error { return failover.Available() }

// SkipUnlessAvailable skips the test under -short (a formation takes tens
// of seconds to start) and when [Available] is not nil.
func SkipUnlessAvailable(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a pg_auto_failover monitor and two PostgreSQL nodes")
	}
	if err := Available(); err != nil {
		t.Skip(err)
	}
}

// Formation is a running monitor and its two nodes.
type Formation struct {
	t testing.TB
	f *failover.Formation
}

// Start starts a formation and returns once a primary and a healthy standby
// (synchronous unless opts.Async) run; everything it started is stopped
// when the test ends, failed or not.
func Start(t testing.TB, opts Options) *Formation {
	t.Helper()
	root := opts.Root
	if root == "" {
		root = filepath.Join(t.TempDir(), "ha")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, err := failover.Start(ctx, failover.Options{Root: root, Async: opts.Async, Log: t.Logf})
	if err != nil {
		t.Fatalf("failovertest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			if s, err := f.State(sctx); err == nil {
				t.Logf("failovertest: the formation at the end:\n%s", s)
			}
			if s, err := f.Events(sctx, 20); err == nil {
				t.Logf("failovertest: its last events:\n%s", s)
			}
			scancel()
		}
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := f.Stop(sctx); err != nil {
			t.Errorf("failovertest: %v", err)
		}
	})
	return &Formation{t: t, f: f}
}

// Core is the formation of internal/failover, whose methods return errors
// instead of failing the test.
func (f *Formation) Core() *failover.Formation { return f.f }

// URL is the multi-host URL of database db on both nodes, with
// target_session_attrs=read-write: the service's DATABASE_URL.
func (f *Formation) URL(db string) string { return f.f.URL(db) }

// CreateDatabase creates database name on the primary (the standby gets it
// by replication) and returns URL(name).
func (f *Formation) CreateDatabase(name string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	u, err := f.f.CreateDatabase(ctx, name)
	f.check(err)
	return u
}

// Primary is the node the monitor holds as primary now.
func (f *Formation) Primary() Node {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := f.f.Primary(ctx)
	f.check(err)
	return n
}

// KillPrimary kills the primary as a machine that is gone stops: SIGKILL to
// its pg_autoctl keeper, its postmaster and their processes (the keeper
// would otherwise restart postgres). It returns the node killed once nothing
// listens on its port.
func (f *Formation) KillPrimary() Node {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := f.f.KillPrimary(ctx)
	f.check(err)
	return n
}

// WaitPrimary waits until the monitor has promoted a node that accepts
// writes (pg_is_in_recovery false) and returns it.
func (f *Formation) WaitPrimary(ctx context.Context) Node {
	f.t.Helper()
	n, err := f.f.WaitPrimary(ctx)
	f.check(err)
	return n
}

// Switchover has the monitor swap the primary and the secondary (`pg_autoctl
// perform switchover`) and returns once the formation is healthy again.
func (f *Formation) Switchover(ctx context.Context) {
	f.t.Helper()
	f.check(f.f.Switchover(ctx))
}

// Restart runs a killed node's keeper again: the node rejoins as a standby
// (pg_rewind as the manager does), which [Formation.WaitHealthy] waits for.
func (f *Formation) Restart(n Node) {
	f.t.Helper()
	f.check(f.f.Restart(n))
}

// WaitHealthy waits until a primary and a secondary are in the states the
// monitor assigned them and the secondary streams (synchronously unless
// Async).
func (f *Formation) WaitHealthy(ctx context.Context) {
	f.t.Helper()
	f.check(f.f.WaitHealthy(ctx))
}

// WaitReplayed waits until the secondary has replayed everything the
// primary has written so far.
func (f *Formation) WaitReplayed(ctx context.Context) {
	f.t.Helper()
	f.check(f.f.WaitReplayed(ctx))
}

// State is the monitor's view of the formation (`pg_autoctl show state`),
// for logs; the error's text when the monitor does not answer.
func (f *Formation) State(ctx context.Context) string {
	s, err := f.f.State(ctx)
	if err != nil {
		return err.Error()
	}
	return s
}

func (f *Formation) check(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatalf("failovertest: %v", err)
	}
}
