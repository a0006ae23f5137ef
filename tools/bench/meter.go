package main

import (
	"cmp"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/labelkit/labels/internal/proc"
)

// What the machine does while a load runs: the CPU time of all cores (busy,
// and what the hypervisor stole), of this process, of single processes and of
// the private server's process tree. The machine is shared (other work runs
// on the same cores) and may be a virtual machine whose host takes cores
// away, so a measurement says what the machine did besides its own work.
// Every figure is cumulative (since boot, or since a process started; read
// by internal/proc): the difference of two readings is what happened between
// them.

// cpuMeter takes CPU readings of the parties of a load, so that a report can
// say how many cores each used.
type cpuMeter struct {
	api, worker, carrier int // pids; 0 when absent
	postmaster           int // the private server's postmaster; 0 with --server
}

// cpuReading is one reading, in seconds of CPU: the machine's busy and
// stolen time (/proc/stat), this process's (the client), and each party's.
type cpuReading struct {
	at                             time.Time
	busy, steal, self              float64
	api, worker, carrier, postgres float64
}

func (m *cpuMeter) read() cpuReading {
	r := cpuReading{at: time.Now(), self: proc.SelfCPU()}
	r.busy, r.steal = proc.MachineCPU()
	r.api, r.worker, r.carrier = proc.ProcessCPU(m.api, false), proc.ProcessCPU(m.worker, false), proc.ProcessCPU(m.carrier, false)
	if m.postmaster > 0 {
		r.postgres = proc.TreeCPU(m.postmaster)
	}
	return r
}

// spent returns the CPU seconds each party spent between a and b, each
// passed through f. The machine's is its busy time: what the host stole is
// not work done here (see since).
func spent(a, b cpuReading, f func(seconds float64) float64) (client, api, worker, carrier, postgres, machine float64) {
	return f(b.self - a.self), f(b.api - a.api), f(b.worker - a.worker), f(b.carrier - a.carrier),
		f(b.postgres - a.postgres), f(b.busy - a.busy)
}

// since returns the cores each party used between a and b, and the cores the
// host stole apart from the machine's.
func since(a, b cpuReading) CPU {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return CPU{}
	}
	var c CPU
	c.Client, c.API, c.Worker, c.Carrier, c.Postgres, c.Machine = spent(a, b, func(s float64) float64 { return round2(s / wall) })
	c.Steal = round2((b.steal - a.steal) / wall)
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

// cpuPerTx is the machine's CPU in microseconds per transaction of a
// pgbench run: its machine core-seconds over its transactions (0 without).
func cpuPerTx(r *PgbenchRun) float64 {
	if r.Transactions <= 0 {
		return 0
	}
	return math.Round(r.CPU.Machine * r.Seconds * 1e6 / float64(r.Transactions))
}

// machine describes this machine from /proc (a field it cannot read stays
// empty); the database fields are filled in later.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Settings: map[string]string{}}
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	meminfo, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(cpuinfo)+"\n"+string(meminfo), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "model name":
			m.CPUModel = cmp.Or(m.CPUModel, strings.TrimSpace(v))
		case "MemTotal":
			m.MemoryGiB = round2(atof(strings.TrimSuffix(strings.TrimSpace(v), " kB")) / (1 << 20))
		}
	}
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	m.Kernel = strings.TrimSpace(string(release))
	return m
}
