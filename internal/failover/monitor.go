package failover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/labelkit/labels/internal/devdb"
)

// nodeState is a node as the monitor sees it.
type nodeState struct {
	name               string
	reported, assigned string
}

// states reads the monitor's view of the formation's nodes.
func (f *Formation) states(ctx context.Context) ([]nodeState, error) {
	conn, err := pgx.Connect(ctx, f.MonitorURL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT nodename, current_group_state::text, assigned_group_state::text
		FROM pgautofailover.current_state('default') ORDER BY node_id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (nodeState, error) {
		var s nodeState
		return s, r.Scan(&s.name, &s.reported, &s.assigned)
	})
}

func (f *Formation) node(name string) (Node, error) {
	for _, n := range f.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return Node{}, fmt.Errorf("failover: the monitor names a node %q this formation does not have", name)
}

// Primary is the node the monitor holds as primary now.
func (f *Formation) Primary(ctx context.Context) (Node, error) {
	var name string
	if err := query(ctx, f.MonitorURL(), `SELECT primary_name FROM pgautofailover.get_primary('default', 0)`, &name); err != nil {
		return Node{}, fmt.Errorf("failover: the monitor's primary: %w", err)
	}
	return f.node(name)
}

// writable states: the node runs as a primary that takes writes.
var writable = map[string]bool{"single": true, "wait_primary": true, "primary": true}

// WaitPrimary waits until the monitor has promoted a node (it reports and
// is assigned single, wait_primary or primary) that accepts writes (out of
// recovery), and returns it.
func (f *Formation) WaitPrimary(ctx context.Context) (Node, error) {
	var found Node
	err := f.waitFor(ctx, "a primary that accepts writes", func(ctx context.Context) (bool, error) {
		states, err := f.states(ctx)
		if err != nil {
			return false, err
		}
		for _, s := range states {
			if s.reported != s.assigned || !writable[s.reported] {
				continue
			}
			n, err := f.node(s.name)
			if err != nil {
				return false, err
			}
			var inRecovery bool
			if err := query(ctx, n.URL("postgres"), `SELECT pg_is_in_recovery()`, &inRecovery); err != nil {
				return false, err
			}
			if !inRecovery {
				found = n
				return true, nil
			}
		}
		return false, fmt.Errorf("no primary yet: %v", states)
	})
	return found, err
}

// WaitHealthy waits until one node is primary and the other secondary, both
// in the state the monitor assigned them, and the secondary streams from the
// primary: as a synchronous standby (in synchronous_standby_names) unless
// the formation is Async.
func (f *Formation) WaitHealthy(ctx context.Context) error {
	return f.waitFor(ctx, "a primary and a healthy secondary", func(ctx context.Context) (bool, error) {
		states, err := f.states(ctx)
		if err != nil {
			return false, err
		}
		var primary, secondary string
		for _, s := range states {
			switch {
			case s.reported != s.assigned:
			case s.reported == "primary":
				primary = s.name
			case s.reported == "secondary":
				secondary = s.name
			}
		}
		if primary == "" || secondary == "" || len(states) != 2 {
			return false, fmt.Errorf("monitor: %v", states)
		}
		p, _ := f.node(primary)
		var names string
		var streaming int
		err = query(ctx, p.URL("postgres"), `SELECT current_setting('synchronous_standby_names'),
			(SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'
				AND sync_state = ANY($1))`, []any{&names, &streaming}, syncStates(f.async))
		if err != nil {
			return false, err
		}
		if streaming != 1 || (names == "") != f.async {
			return false, fmt.Errorf("%s: synchronous_standby_names %q, %d standby streaming", primary, names, streaming)
		}
		return true, nil
	})
}

func syncStates(async bool) []string {
	if async {
		return []string{"async"}
	}
	return []string{"sync", "quorum"}
}

// WaitReplayed waits until the secondary has replayed everything the
// primary has written so far.
func (f *Formation) WaitReplayed(ctx context.Context) error {
	p, err := f.Primary(ctx)
	if err != nil {
		return err
	}
	s := f.nodes[0]
	if s.Name == p.Name {
		s = f.nodes[1]
	}
	var lsn string
	if err := query(ctx, p.URL("postgres"), `SELECT pg_current_wal_lsn()::text`, &lsn); err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	return f.waitFor(ctx, s.Name+" to replay "+lsn, func(ctx context.Context) (bool, error) {
		var done bool
		err := query(ctx, s.URL("postgres"), `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, &done, lsn)
		return done, err
	})
}

// Switchover has the monitor hand the primary's role to the secondary
// (`pg_autoctl perform switchover`, planned: the primary drains first) and
// returns once the formation is healthy again, the roles swapped.
func (f *Formation) Switchover(ctx context.Context) error {
	wait := 120
	if d, ok := ctx.Deadline(); ok {
		wait = max(1, int(time.Until(d).Seconds()))
	}
	if err := f.run(ctx, "perform", "switchover", "--pgdata", f.monitor.Dir, "--wait", strconv.Itoa(wait)); err != nil {
		return err
	}
	return f.WaitHealthy(ctx)
}

// State is the monitor's view of the formation (`pg_autoctl show state`),
// for logs.
func (f *Formation) State(ctx context.Context) (string, error) {
	return f.output(ctx, "show", "state", "--pgdata", f.monitor.Dir)
}

// Events are the monitor's last count events (`pg_autoctl show events`):
// each state change and why, a standby's loss and the primary's drop to
// asynchronous replication among them.
func (f *Formation) Events(ctx context.Context, count int) (string, error) {
	return f.output(ctx, "show", "events", "--pgdata", f.monitor.Dir, "--count", strconv.Itoa(count))
}

// CreateDatabase creates database name on the primary (the standby gets it
// by replication) unless it exists, and returns its multi-host URL.
func (f *Formation) CreateDatabase(ctx context.Context, name string) (string, error) {
	return devdb.EnsureDatabase(ctx, f.URL("postgres"), name)
}

// waitFor polls cond every 100ms until it holds or ctx ends, which returns
// what it waited for with cond's last error.
func (f *Formation) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := cond(cctx)
		cancel()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failover: waiting for %s: %w", what, errors.Join(ctx.Err(), last))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// query runs sql on a connection of its own and scans its one row into dst
// (a []any scans several columns).
func query(ctx context.Context, url, sql string, dst any, args ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if many, ok := dst.([]any); ok {
		return conn.QueryRow(ctx, sql, args...).Scan(many...)
	}
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// String shows a node's state as reported/assigned.
func (s nodeState) String() string {
	return s.name + ":" + strings.Join([]string{s.reported, s.assigned}, "/")
}
