package capacity

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/labelkit/labels/tools/bench/internal/host"
)

// Host is what the machine did during one phase, in per cent of all the
// cores' time (tools/bench/internal/host: the machine is shared with other
// work, and may be a virtual machine whose host takes cores away).
type Host struct {
	BusyPct   float64 `json:"busy_pct"`   // all CPUs, everyone's work; not what the host stole
	IOWaitPct float64 `json:"iowait_pct"` // all CPUs idle with I/O outstanding
	// StealPct is the time the cores were ready to run while the host of a
	// virtual machine ran something else: not work done here, so not in
	// BusyPct, and latencies grow with it.
	StealPct  float64 `json:"steal_pct"`
	OwnPct    float64 `json:"own_pct"`    // this process: load generator, API, workers
	DBPct     float64 `json:"db_pct"`     // this database's backends
	OthersPct float64 `json:"others_pct"` // the rest: other work, PostgreSQL's background processes
	Load1     float64 `json:"load1"`
	// PageoutMiBPerSec is what the kernel's proactive reclaim paged out
	// meanwhile (see host.PagedOut); absent without the figure.
	PageoutMiBPerSec *float64 `json:"pageout_mib_per_s,omitempty"`
	// Waits counts what this database's active backends were doing, sampled
	// every 100 ms: wait_event_type:wait_event, or CPU when not waiting.
	Waits   map[string]int `json:"waits"`
	Samples int            `json:"samples"`
}

// hostProbe measures one phase: the machine, this database's backends, and
// what they wait on.
type hostProbe struct {
	e       *env
	start   host.Reading
	db      map[int]float64 // backends' CPU seconds by pid at the start
	stop    chan struct{}
	done    chan struct{}
	waits   map[string]int
	samples int
}

// probe starts measuring the machine; end stops it.
func (e *env) probe(ctx context.Context) *hostProbe {
	p := &hostProbe{e: e, db: e.backendCPU(ctx), stop: make(chan struct{}), done: make(chan struct{}), waits: map[string]int{}}
	p.start = host.Read()
	cfg, err := pgx.ParseConfig(e.url)
	if err != nil {
		close(p.done)
		return p
	}
	cfg.RuntimeParams["application_name"] = "capacity-probe"
	go func() {
		defer close(p.done)
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rows, err := conn.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
				FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'active' AND application_name <> 'capacity-probe'`)
			if err != nil {
				return
			}
			ws, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return
			}
			p.samples++
			for _, w := range ws {
				p.waits[w]++
			}
		}
	}()
	return p
}

// backendCPU returns the CPU seconds of this database's backends by pid.
func (e *env) backendCPU(ctx context.Context) map[int]float64 {
	out := map[int]float64{}
	rows, err := e.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return out
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return out
	}
	for _, pid := range pids {
		if t := host.ProcessCPU(int(pid), false); t > 0 {
			out[int(pid)] = t
		}
	}
	return out
}

func (p *hostProbe) end(ctx context.Context) Host {
	close(p.stop)
	<-p.done
	d := host.Read().Since(p.start)
	h := Host{Waits: p.waits, Samples: p.samples}
	total := d.CPU.Total()
	if total <= 0 {
		return h
	}
	h.BusyPct = 100 * d.CPU.Busy / total
	h.IOWaitPct = 100 * d.CPU.IOWait / total
	h.StealPct = 100 * d.CPU.Steal / total
	h.OwnPct = 100 * d.Self / total
	var db float64
	for pid, t := range p.e.backendCPU(ctx) {
		// A backend that started during the phase counts from zero.
		db += t - min(t, p.db[pid])
	}
	h.DBPct = 100 * db / total
	h.OthersPct = max(0, h.BusyPct-h.OwnPct-h.DBPct)
	h.Load1 = host.LoadAverage()[0]
	if v, ok := d.PageoutMiBPerSec(); ok {
		h.PageoutMiBPerSec = &v
	}
	return h
}

// topWaits renders the most frequent waits as shares of the samples.
func (h Host) topWaits(n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	total := 0
	for k, v := range h.Waits {
		all = append(all, kv{k, v})
		total += v
	}
	if total == 0 {
		return "-"
	}
	slices.SortFunc(all, func(a, b kv) int { return b.v - a.v })
	var out []string
	for i, x := range all {
		if i == n {
			break
		}
		out = append(out, fmt.Sprintf("%s %.0f%%", x.k, 100*float64(x.v)/float64(total)))
	}
	return strings.Join(out, ", ")
}

func (h Host) String() string {
	s := fmt.Sprintf("CPU %.0f%% busy (this run %.0f%%, its backends %.0f%%, others %.0f%%), stolen by the host %.0f%%, iowait %.0f%%, load %.1f",
		h.BusyPct, h.OwnPct, h.DBPct, h.OthersPct, h.StealPct, h.IOWaitPct, h.Load1)
	if h.PageoutMiBPerSec != nil {
		s += fmt.Sprintf(", kernel paged out %.1f MiB/s", *h.PageoutMiBPerSec)
	}
	return s
}
