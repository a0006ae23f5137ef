package main

import (
	"bufio"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuMeter takes CPU readings of the parties of a load, so that a report can
// say how many cores each used.
type cpuMeter struct {
	api, worker, carrier int // pids; 0 when absent
	postmaster           int // the private server's postmaster; 0 with --server
}

// cpuReading is one reading, in seconds of CPU.
type cpuReading struct {
	at                            time.Time
	client                        float64
	api, worker, carrier, postgre float64
	machineBusy, steal            float64
	pagedOut                      float64 // bytes, as pagedOut returns them
	pagedOK                       bool
}

func (m *cpuMeter) read() cpuReading {
	r := cpuReading{at: time.Now(), client: selfCPU()}
	r.machineBusy, r.steal = machineBusy()
	r.pagedOut, r.pagedOK = pagedOut(damonRoot)
	if m.api > 0 {
		r.api = procCPU(m.api, false)
	}
	if m.worker > 0 {
		r.worker = procCPU(m.worker, false)
	}
	if m.carrier > 0 {
		r.carrier = procCPU(m.carrier, false)
	}
	if m.postmaster > 0 {
		r.postgre = treeCPU(m.postmaster)
	}
	return r
}

// spent returns the CPU seconds each party spent between a and b, each
// passed through f.
func spent(a, b cpuReading, f func(seconds float64) float64) (client, api, worker, carrier, postgres, machine float64) {
	return f(b.client - a.client), f(b.api - a.api), f(b.worker - a.worker), f(b.carrier - a.carrier),
		f(b.postgre - a.postgre), f(b.machineBusy - a.machineBusy)
}

// since returns the cores each party used between a and b.
func since(a, b cpuReading) CPU {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return CPU{}
	}
	var c CPU
	c.Client, c.API, c.Worker, c.Carrier, c.Postgres, c.Machine = spent(a, b, func(s float64) float64 { return round2(s / wall) })
	c.Steal = round2((b.steal - a.steal) / wall)
	if a.pagedOK && b.pagedOK {
		v := round2((b.pagedOut - a.pagedOut) / (1 << 20) / wall)
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
	return c
}

// selfCPU is this process's user + system time.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// procStat returns the fields of /proc/pid/stat after the command name.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// procCPU is utime + stime of pid (and of its reaped children with children).
func procCPU(pid int, children bool) float64 {
	f := procStat(pid)
	// After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return 0
	}
	sum := atof(f[11]) + atof(f[12])
	if children {
		sum += atof(f[13]) + atof(f[14])
	}
	return sum / clockTicks
}

// treeCPU is the CPU of a postmaster and every backend: the live children's
// own time, and the postmaster's reaped children (backends that exited).
func treeCPU(root int) float64 {
	total := procCPU(root, true)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return total
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		f := procStat(pid)
		if len(f) < 15 || f[1] != strconv.Itoa(root) {
			continue
		}
		total += (atof(f[11]) + atof(f[12])) / clockTicks
	}
	return total
}

// machineBusy is the CPU time every core spent not idle since boot, and the
// time stolen from them: on a virtual machine, time its cores were ready to
// run while the host ran something else. Stolen time is not work done here,
// so it is not in busy.
func machineBusy() (busy, steal float64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	return cpuLine(sc.Text())
}

// cpuLine reads the first line of /proc/stat: user nice system idle iowait
// irq softirq steal guest guest_nice, in clock ticks.
func cpuLine(line string) (busy, steal float64) {
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, v := range fields[1:] {
		switch {
		case i == 3 || i == 4: // idle, iowait
		case i == 7:
			steal = atof(v)
		case i >= 8: // guest time is already counted in user
		default:
			busy += atof(v)
		}
	}
	return busy / clockTicks, steal / clockTicks
}

func loadAverage() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i] = atof(f[i])
	}
	return out
}

func atof(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

// machine describes this machine; the database fields are filled in later.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Settings: map[string]string{}}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				m.MemoryGiB = round2(atof(f[1]) / (1 << 20))
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.ProactiveReclaim = proactiveReclaim(damonRoot)
	return m
}
