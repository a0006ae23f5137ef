package failover

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// DevMonitorPort and DevNodePorts are where the development formation of
// `go tool task fleet HA=1` listens (tools/fleet, kept under .pgdata/ha):
// below Linux's ephemeral ports (32768-60999), which a client may hold.
const DevMonitorPort = 15440

// DevNodePorts are the development formation's nodes' ports; see
// [DevMonitorPort].
var DevNodePorts = [2]int{15441, 15442}

// StartWithDatabase runs the formation of o.Root as [Start] does, creating
// the root's parent first when it is missing, and creates database db on it
// ([Formation.CreateDatabase]). It returns the formation and db's
// multi-host URL; on an error everything it started is stopped.
func StartWithDatabase(ctx context.Context, o Options, db string) (*Formation, string, error) {
	if err := os.MkdirAll(filepath.Dir(o.Root), 0o755); err != nil {
		return nil, "", err
	}
	if o.Log != nil {
		o.Log("starting the formation in %s (a monitor and two nodes; the first run creates them)", o.Root)
	}
	f, err := Start(ctx, o)
	if err != nil {
		return nil, "", err
	}
	u, err := f.CreateDatabase(ctx, db)
	if err != nil {
		_ = f.Stop(context.WithoutCancel(ctx))
		return nil, "", err
	}
	return f, u, nil
}

// Summary writes what a developer needs of a running formation, in the
// columns of a fleet's summary: database db's URL, the primary, the
// standby's mode and the root; the monitor's `pg_autoctl show state`; and
// how to fail over (kill the primary, or `pg_autoctl perform switchover`).
func (f *Formation) Summary(ctx context.Context, w io.Writer, db string) {
	p, _ := f.Primary(ctx)
	standby := "synchronous"
	if f.async {
		standby = "asynchronous"
	}
	fmt.Fprintf(w, "  PostgreSQL   %s   (pg_auto_failover: primary %s, %s standby; in %s)\n", f.URL(db), p.Name, standby, f.root)
	fmt.Fprintf(w, "  monitor      pg_autoctl show state --monitor '%s'\n", f.MonitorURL())
	fmt.Fprintf(w, "               (show events: what it did and why; a failover: kill -9 the primary's postmaster\n"+
		"               and its pg_autoctl, or sudo -u postgres env XDG_CONFIG_HOME=%s/xdg XDG_DATA_HOME=%s/xdg\n"+
		"               pg_autoctl perform switchover --pgdata %s)\n", f.root, f.root, f.monitor.Dir)
}
