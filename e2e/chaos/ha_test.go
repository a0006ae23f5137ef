package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/labelkit/labels/internal/testutil/failovertest"
)

// HA is a run on a failover formation: the fleet gets the formation's
// multi-host DATABASE_URL (target_session_attrs=read-write), no worker or
// API is killed, and the formation is disturbed instead, one step after
// another from an eighth into the window, a twentieth of the window apart.
// The intents not sent in bursts or the tail are the steady load, spread
// over three quarters of the window as in any run; those not sent when the
// last step is over are dropped (a run where none is has a violation: the
// last step saw no load), and the window ends there.
//
// On top of the run's checks: every 202 a caller got names an intent and a
// key the primary still holds at the end (with Async, a missing one is
// counted, not a violation: that is what an asynchronous standby may lose);
// the workers are the processes started first, and each completes a purchase
// after the last step; every 503 carries Retry-After; and after a rejoin,
// creates are still accepted.
type HA struct {
	// Formation is the monitor, the primary and the standby, started by
	// the test (failovertest.Start).
	Formation *failovertest.Formation
	// Async says the standby is asynchronous: acknowledged requests missing
	// at the end are measured (Figures.Lost), not violations; the other
	// checks still run, and a lost intent breaks some of them (its GET
	// answers 404, the carrier sold a label for it).
	Async bool
	Steps []Step
	// Burst intents for each KillWhileAccepting step, the run's last ones,
	// are not sent at their time in the window but all at once by the step,
	// which kills the primary as soon as half as many creates are in flight.
	Burst int
	// Tail intents, the ones before the burst's, are sent once the last
	// step is over, 150 ms apart: the load after it.
	Tail int
}

// Step is one disturbance of the formation.
type Step int

const (
	// KillWhilePurchasing kills the primary (postmaster and keeper, SIGKILL)
	// while some worker is in the middle of a purchase.
	KillWhilePurchasing Step = iota + 1
	// KillWhileAccepting kills the primary while creates are in flight.
	KillWhileAccepting
	// Switchover is the planned switchover: the primary hands over to the
	// standby.
	Switchover
	// Rejoin restarts the node killed last, which rejoins as a standby
	// (pg_rewind), and waits until the formation is healthy.
	Rejoin
)

func (s Step) String() string {
	switch s {
	case KillWhilePurchasing:
		return "kill -9 the primary while purchases are in flight"
	case KillWhileAccepting:
		return "kill -9 the primary while creates are in flight"
	case Switchover:
		return "planned switchover"
	case Rejoin:
		return "the killed node rejoins as a standby"
	}
	return fmt.Sprintf("step %d", int(s))
}

// The simulator of an HA run only takes its time (200 to 500 ms a purchase,
// so that a kill finds purchases in flight): whatever goes wrong comes from
// the formation.
var haSimEnv = map[string]string{"SIM_LATENCY": "200ms", "SIM_LATENCY_JITTER": "300ms"}

// StepFigures is what one step of an HA run measured.
type StepFigures struct {
	Step Step
	// At is when the step began (the kill, the switchover's start).
	At time.Time
	// InFlight says what was in flight when it began.
	InFlight string
	// Gone is the time from At until the killed node's processes were dead
	// and its port closed (zero for other steps). Its backends may still
	// commit in that moment, or just after when they were mid-statement.
	Gone time.Duration
	// Ready is the time from At until the formation had a primary accepting
	// writes again (Rejoin: until it was healthy).
	Ready time.Duration
	// FirstAccept is the time from At until the first 202 to a create sent
	// after At+Gone (after a kill: necessarily on the new primary);
	// negative when there was none.
	FirstAccept time.Duration
	// PendingAtStep intents were accepted before At and became final after
	// it, the last LastFinal after At.
	PendingAtStep int
	LastFinal     time.Duration
	// Followed is the time from At until every API and worker held a
	// connection to the new primary (not for Rejoin, which keeps it).
	Followed time.Duration
}

// followTimeout bounds the wait for the binaries to reach a new primary: a
// safety net far above the second or two it takes.
const followTimeout = time.Minute

// awaitFollowers waits until every API and worker running holds a
// connection to primary; one that does not within followTimeout is a
// violation (it did not follow).
func (r *run) awaitFollowers(ctx context.Context, primary failovertest.Node) {
	deadline := time.Now().Add(followTimeout)
	for _, p := range r.fleet.f.Procs() {
		if (p.Spec.Bin != "api" && p.Spec.Bin != "worker") || p.Exited() {
			continue
		}
		for {
			n, err := connectionsTo(p.Pid(), primary.Port)
			if err == nil && n > 0 {
				break
			}
			if time.Now().After(deadline) || !sleep(ctx, 50*time.Millisecond) {
				r.fig.violate("%s (pid %d) holds no connection to the new primary %s (%s) %s after it was ready (%v)",
					p.Name(), p.Pid(), primary.Name, primary.Addr(), followTimeout, err)
				break
			}
		}
	}
}

// bursts is the number of KillWhileAccepting steps, each with its burst.
func (ha *HA) bursts() int {
	n := 0
	for _, s := range ha.Steps {
		if s == KillWhileAccepting {
			n++
		}
	}
	return n
}

// dropUnsent removes the intents of the steady load that were not sent
// before the steps were over: the run is about the ones sent. None dropped
// means the load ran out before the last step, which then saw none.
func (r *run) dropUnsent() {
	sent := r.intents[:0]
	for _, in := range r.intents {
		in.mu.Lock()
		unsent := in.unsent
		in.mu.Unlock()
		if !unsent {
			sent = append(sent, in)
		}
	}
	dropped := len(r.intents) - len(sent)
	r.intents = sent
	r.fig.Intents = len(sent)
	if dropped == 0 {
		r.fig.violate("the steady load ran out before the last step was over: raise the intents or the duration")
	}
	r.say("%d intents sent; %d planned for after the last step dropped", len(sent), dropped)
}

// haEvents is the one event of an HA run: every step in turn.
func (r *run) haEvents() []event {
	d := r.cfg.Duration
	var names []string
	for _, s := range r.cfg.HA.Steps {
		names = append(names, s.String())
	}
	return []event{{at: d / 8, name: strings.Join(names, ", then "), do: func(ctx context.Context) error {
		for i, s := range r.cfg.HA.Steps {
			if i > 0 && !sleep(ctx, d/20) {
				return ctx.Err()
			}
			if err := r.step(ctx, s); err != nil {
				return err
			}
		}
		close(r.tail)
		return nil
	}}}
}

// gateTimeout bounds the wait for the moment a kill is meant to interrupt.
const gateTimeout = 10 * time.Second

// step carries out s and records its figures.
func (r *run) step(ctx context.Context, s Step) error {
	f := r.cfg.HA.Formation
	sf := StepFigures{Step: s, FirstAccept: -1}
	var victim failovertest.Node
	if s == KillWhilePurchasing || s == KillWhileAccepting {
		victim = f.Primary() // asked first: the kill follows the gate at once
	}
	switch s {
	case KillWhilePurchasing:
		n := r.waitFor(ctx, 1, r.runningPurchases)
		sf.InFlight = fmt.Sprintf("%d purchases running", n)
	case KillWhileAccepting:
		close(r.bursts[r.accepting])
		r.accepting++
		n := r.waitFor(ctx, max(1, r.cfg.HA.Burst/2), func(context.Context) int { return r.rec.inFlight() })
		sf.InFlight = fmt.Sprintf("%d creates in flight", n)
	}
	sf.At = time.Now()
	switch s {
	case KillWhilePurchasing, KillWhileAccepting:
		if err := f.Core().Kill(ctx, victim); err != nil {
			return err
		}
		sf.Gone = time.Since(sf.At)
		r.killed = victim
		r.say("primary %s killed (%s); waiting for the monitor to promote the standby", victim.Name, sf.InFlight)
		f.WaitPrimary(ctx)
	case Switchover:
		f.Switchover(ctx)
	case Rejoin:
		f.Restart(r.killed)
		f.WaitHealthy(ctx)
	}
	sf.Ready = time.Since(sf.At)
	r.say("%s: ready after %.1fs; %s", s, sf.Ready.Seconds(), f.State(ctx))
	if s != Rejoin {
		r.awaitFollowers(ctx, f.Primary())
		sf.Followed = time.Since(sf.At)
	}
	r.fig.HA = append(r.fig.HA, sf)
	return ctx.Err()
}

// waitFor polls count until it reaches least, for at most gateTimeout, and
// returns its last value.
func (r *run) waitFor(ctx context.Context, least int, count func(context.Context) int) int {
	ctx, cancel := context.WithTimeout(ctx, gateTimeout)
	defer cancel()
	for {
		if n := count(ctx); n >= least || !sleep(ctx, 5*time.Millisecond) {
			return n
		}
	}
}

// runningPurchases counts the buy_label jobs fetched within the last 100 ms
// and still running: purchases some worker is in the middle of, each taking
// the simulator at least 200 ms.
func (r *run) runningPurchases(ctx context.Context) int {
	var n int
	_ = r.pool.QueryRow(ctx, `SELECT count(*) FROM river_job
		WHERE kind = 'buy_label' AND state = 'running' AND attempted_at > now() - interval '100 milliseconds'`).Scan(&n)
	return n
}

// verifyHA holds an HA run to its own checks, on the formation's primary at
// the end, and fills in the steps' figures.
func (r *run) verifyHA(ctx context.Context) {
	f := r.fig
	r.rec.mu.Lock()
	acks := append([]ack(nil), r.rec.acks...)
	r.rec.mu.Unlock()

	// Every 202: its intent and its key on the primary.
	seen := map[string]bool{}
	var ids, callers, keys []string
	for _, a := range acks {
		if !seen[a.requestID] {
			seen[a.requestID] = true
			ids, callers, keys = append(ids, a.requestID), append(callers, a.caller), append(keys, a.key)
		}
	}
	f.Acknowledged = len(ids)
	rows, err := r.pool.Query(ctx, `SELECT a.id, i.request_id IS NOT NULL, k.request_id IS NOT NULL
		FROM unnest($1::text[], $2::text[], $3::text[]) AS a (id, caller, key)
		LEFT JOIN label_intents i ON i.request_id = a.id AND i.caller_id = a.caller AND i.idem_key = a.key
		LEFT JOIN idempotency_keys k ON k.request_id = a.id AND k.caller_id = a.caller AND k.idem_key = a.key`, ids, callers, keys)
	if err != nil {
		f.violate("reading the acknowledged intents: %v", err)
	} else {
		for rows.Next() {
			var id string
			var intent, key bool
			if err := rows.Scan(&id, &intent, &key); err != nil {
				f.violate("reading the acknowledged intents: %v", err)
				break
			}
			if intent && key {
				continue
			}
			f.Lost++
			if !r.cfg.HA.Async {
				f.violate("acknowledged with 202 but missing on the primary: %s (intent there: %t, key there: %t)", id, intent, key)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			f.violate("reading the acknowledged intents: %v", err)
		}
	}

	// The steps' figures.
	var lastReady time.Time
	for i := range f.HA {
		s := &f.HA[i]
		end := s.At.Add(s.Ready)
		if end.After(lastReady) {
			lastReady = end
		}
		first := time.Time{}
		for _, a := range acks {
			if a.sent.After(s.At.Add(s.Gone)) && (first.IsZero() || a.at.Before(first)) {
				first = a.at
			}
		}
		if !first.IsZero() {
			s.FirstAccept = first.Sub(s.At)
		}
		if s.Step == Rejoin && !hasAckAfter(acks, end) {
			f.violate("no create was accepted after the rejoin (healthy at %s)", end.Format(time.TimeOnly))
		}
		var last *time.Time
		if err := r.pool.QueryRow(ctx, `SELECT count(*), max(completed_at) FROM label_intents WHERE created_at < $1 AND completed_at > $1`,
			s.At).Scan(&s.PendingAtStep, &last); err != nil {
			f.violate("reading the intents in flight at %s: %v", s.Step, err)
		} else if last != nil {
			s.LastFinal = last.Sub(s.At)
		}
	}

	// The workers: the processes started first, each connected to the
	// primary at the end (a worker that did not follow it is not).
	primary := r.cfg.HA.Formation.Primary()
	for _, p := range r.fleet.f.Procs() {
		if p.Spec.Bin != "worker" {
			continue
		}
		if p.Exited() {
			f.violate("%s (pid %d) exited", p.Name(), p.Pid())
			continue
		}
		n := 0
		for _, l := range p.Lines() {
			if l.At.After(lastReady) && l.Msg() == "buy_label attempt" && l.Field("outcome") == "succeeded" {
				n++
			}
		}
		f.WorkerPIDs = append(f.WorkerPIDs, p.Pid())
		f.WorkerPurchasesAfter = append(f.WorkerPurchasesAfter, n)
		if c, err := connectionsTo(p.Pid(), primary.Port); err != nil {
			f.violate("%s (pid %d): reading its connections: %v", p.Name(), p.Pid(), err)
		} else if c == 0 {
			f.violate("%s (pid %d) holds no connection to the primary %s (%s)", p.Name(), p.Pid(), primary.Name, primary.Addr())
		}
	}
	if n := len(f.WorkerPIDs); n != r.cfg.Workers {
		f.violate("%d workers running at the end for %d started", n, r.cfg.Workers)
	}
}

func hasAckAfter(acks []ack, t time.Time) bool {
	for _, a := range acks {
		if a.sent.After(t) {
			return true
		}
	}
	return false
}

// printHA writes the figures of an HA run.
func (f *Figures) printHA(p func(name, format string, args ...any)) {
	ha := f.Config.HA
	if ha == nil {
		return
	}
	mode := "synchronous"
	if ha.Async {
		mode = "asynchronous"
	}
	p("formation", "primary and %s standby under a monitor; %d APIs, %d workers on its multi-host URL", mode, f.Config.APIs, f.Config.Workers)
	for _, s := range f.HA {
		p(s.Step.String(), "%s", s.InFlight)
		if s.Gone > 0 {
			p("  processes dead, port closed", "%.0fms after the kill", float64(s.Gone)/float64(time.Millisecond))
		}
		p("  formation ready after", "%.1fs", s.Ready.Seconds())
		if s.Followed > 0 {
			p("  every API and worker on the primary", "%.1fs after it", s.Followed.Seconds())
		}
		if s.FirstAccept >= 0 {
			p("  first 202 to a create sent after that", "%.1fs after it", s.FirstAccept.Seconds())
		} else {
			p("  first 202 to a create sent after that", "none")
		}
		p("  intents accepted before, final after", "%d, the last %.1fs after it", s.PendingAtStep, s.LastFinal.Seconds())
	}
	p("acknowledged (202) intents missing", "%d of %d", f.Lost, f.Acknowledged)
	p("503 answers (all with Retry-After)", "%d (%d without)", f.Answers[http.StatusServiceUnavailable], f.NoRetryAfter)
	p("workers (same processes throughout)", "pids %v, each connected to the primary at the end; purchases each completed after the last step %v", f.WorkerPIDs, f.WorkerPurchasesAfter)
}

// connectionsTo counts the established TCP connections of process pid to
// port (Linux: its socket descriptors, found in /proc/net/tcp and tcp6).
func connectionsTo(pid, port int) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	sockets := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			sockets[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st ... inode (the tenth field)
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "01" || !sockets[f[9]] {
				continue
			}
			_, hex, _ := strings.Cut(f[2], ":")
			if p, err := strconv.ParseUint(hex, 16, 32); err == nil && int(p) == port {
				n++
			}
		}
	}
	return n, nil
}
