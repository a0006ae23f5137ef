package main

import (
	"math"

	"github.com/labelkit/labels/tools/bench/internal/host"
)

// cpuMeter takes CPU readings of the parties of a load, so that a report can
// say how many cores each used.
type cpuMeter struct {
	api, worker, carrier int // pids; 0 when absent
	postmaster           int // the private server's postmaster; 0 with --server
}

// cpuReading is one reading, in seconds of CPU: the machine's (host.Read;
// its Self is this process, the client) and each party's.
type cpuReading struct {
	host.Reading
	api, worker, carrier, postgres float64
}

func (m *cpuMeter) read() cpuReading {
	r := cpuReading{Reading: host.Read()}
	if m.api > 0 {
		r.api = host.ProcessCPU(m.api, false)
	}
	if m.worker > 0 {
		r.worker = host.ProcessCPU(m.worker, false)
	}
	if m.carrier > 0 {
		r.carrier = host.ProcessCPU(m.carrier, false)
	}
	if m.postmaster > 0 {
		r.postgres = host.TreeCPU(m.postmaster)
	}
	return r
}

// spent returns the CPU seconds each party spent between a and b, each
// passed through f. The machine's is its busy time: what the host stole is
// not work done here (see since).
func spent(a, b cpuReading, f func(seconds float64) float64) (client, api, worker, carrier, postgres, machine float64) {
	return f(b.Self - a.Self), f(b.api - a.api), f(b.worker - a.worker), f(b.carrier - a.carrier),
		f(b.postgres - a.postgres), f(b.CPU.Busy - a.CPU.Busy)
}

// since returns the cores each party used between a and b, the cores the
// host stole apart from the machine's, and the kernel's pageout rate.
func since(a, b cpuReading) CPU {
	d := b.Since(a.Reading)
	wall := d.Seconds
	if wall <= 0 {
		return CPU{}
	}
	var c CPU
	c.Client, c.API, c.Worker, c.Carrier, c.Postgres, c.Machine = spent(a, b, func(s float64) float64 { return round2(s / wall) })
	c.Steal = round2(d.CPU.Steal / wall)
	if v, ok := d.PageoutMiBPerSec(); ok {
		v = round2(v)
		c.Pageout = &v
	}
	return c
}

// perLabel returns the CPU microseconds per label each party spent between
// a and b.
func perLabel(a, b cpuReading, labels int64) CPUPerLabel {
	if labels <= 0 {
		return CPUPerLabel{}
	}
	var c CPUPerLabel
	c.Client, c.API, c.Worker, c.Carrier, c.Postgres, c.Machine = spent(a, b, func(s float64) float64 {
		return math.Round(s * 1e6 / float64(labels))
	})
	c.Ours = c.Client + c.API + c.Worker + c.Carrier + c.Postgres
	return c
}

// ceilingCPUPerTx is the machine's CPU in microseconds per transaction of
// pgbench runs together: their machine core-seconds over their
// transactions; 0 when one of them has no transactions or no seconds.
func ceilingCPUPerTx(runs ...*PgbenchRun) float64 {
	var coreSeconds float64
	var tx int64
	for _, r := range runs {
		if r == nil || r.Transactions <= 0 || r.Seconds <= 0 {
			return 0
		}
		coreSeconds += r.CPU.Machine * r.Seconds
		tx += r.Transactions
	}
	if tx == 0 {
		return 0
	}
	return math.Round(coreSeconds * 1e6 / float64(tx))
}

// machine describes this machine; the database fields are filled in later.
func machine() Machine {
	d := host.Describe()
	return Machine{CPUs: d.CPUs, CPUModel: d.CPUModel, MemoryGiB: round2(d.MemoryGiB), Kernel: d.Kernel, GoVersion: d.GoVersion,
		Settings: map[string]string{}, ProactiveReclaim: host.ProactiveReclaim(host.DAMONRoot)}
}
