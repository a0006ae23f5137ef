package main

import (
	"bufio"
	"cmp"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the machine does while a load runs: the CPU time of all cores (busy,
// and what the hypervisor stole), of this process, of single processes and of
// the private server's process tree. The machine is shared (other work runs
// on the same cores) and may be a virtual machine whose host takes cores
// away, so a measurement says what the machine did besides its own work.
// Every figure is cumulative (since boot, or since a process started): the
// difference of two readings is what happened between them.

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

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
	r := cpuReading{at: time.Now(), self: selfCPU()}
	if f, err := os.Open("/proc/stat"); err == nil {
		sc := bufio.NewScanner(f)
		if sc.Scan() {
			r.busy, r.steal = parseCPULine(sc.Text())
		}
		f.Close()
	}
	r.api, r.worker, r.carrier = processCPU(m.api, false), processCPU(m.worker, false), processCPU(m.carrier, false)
	if m.postmaster > 0 {
		r.postgres = treeCPU(m.postmaster)
	}
	return r
}

// parseCPULine reads the first line of /proc/stat (user nice system idle
// iowait irq softirq steal guest guest_nice, in clock ticks) as seconds. Busy
// is user, nice, system, irq and softirq time: work done on this machine,
// everyone's (guest time is already counted in user). Steal is time the cores
// were ready to run while the host of a virtual machine ran something else:
// not work done here, so not in busy; latencies grow with it. Any other line
// reads as zero.
func parseCPULine(line string) (busy, steal float64) {
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, v := range fields[1:min(len(fields), 9)] {
		switch i {
		case 3, 4: // idle, iowait
		case 7:
			steal = atof(v)
		default:
			busy += atof(v)
		}
	}
	return busy / clockTicks, steal / clockTicks
}

// selfCPU is this process's user + system time, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// procStat returns the fields of /proc/pid/stat after the command name:
// state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if i := strings.LastIndexByte(string(b), ')'); err == nil && i >= 0 {
		if f := strings.Fields(string(b[i+1:])); len(f) >= 15 {
			return f
		}
	}
	return nil
}

// processCPU is utime + stime of pid in seconds (with children, also of its
// reaped children); 0 when the process is gone or pid is 0.
func processCPU(pid int, children bool) float64 {
	f := procStat(pid)
	if pid <= 0 || f == nil {
		return 0
	}
	sum := atof(f[11]) + atof(f[12])
	if children {
		sum += atof(f[13]) + atof(f[14])
	}
	return sum / clockTicks
}

// treeCPU is the CPU of a parent and its children, in seconds: the live
// children's own time, and the parent's reaped children (for a PostgreSQL
// postmaster, the backends that exited).
func treeCPU(root int) float64 {
	total := processCPU(root, true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if f := procStat(pid); f != nil && f[1] == strconv.Itoa(root) {
			total += (atof(f[11]) + atof(f[12])) / clockTicks
		}
	}
	return total
}

// loadAverage is /proc/loadavg: the 1, 5 and 15 minute load averages.
func loadAverage() [3]float64 {
	var out [3]float64
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i] = atof(f[i])
	}
	return out
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
