// Package host reads what the machine does while the bench and its capacity
// measurement run: the CPU time of all cores (busy, idle, iowait, and the
// time the hypervisor stole), of single processes and of a process tree, the
// load average, a description of the machine, and what the kernel's
// proactive reclaim (DAMON) pages out. The machine is shared (other work runs
// on the same cores) and may be a virtual machine whose host takes cores
// away, so a measurement says what the machine did besides its own work.
//
// Every figure is cumulative (since boot, or since a process started): the
// difference of two readings is what happened between them.
package host

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ClockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100 on
// every Linux architecture Go supports.
const ClockTicks = 100

// CPUTimes is the time all cores together spent in each state, in seconds
// (/proc/stat's first line).
type CPUTimes struct {
	// Busy is user, nice, system, irq and softirq time: work done on this
	// machine, everyone's. Guest time is already counted in user.
	Busy float64
	Idle float64
	// IOWait is idle time with I/O outstanding.
	IOWait float64
	// Steal is time the cores were ready to run while the host of a
	// virtual machine ran something else. It is not work done here, so it
	// is not in Busy; latencies grow with it.
	Steal float64
}

// Total is all the cores' time: busy, idle, iowait and stolen.
func (t CPUTimes) Total() float64 { return t.Busy + t.Idle + t.IOWait + t.Steal }

// Sub returns the time spent from u to t.
func (t CPUTimes) Sub(u CPUTimes) CPUTimes {
	return CPUTimes{Busy: t.Busy - u.Busy, Idle: t.Idle - u.Idle, IOWait: t.IOWait - u.IOWait, Steal: t.Steal - u.Steal}
}

// ReadCPU reads /proc/stat; zero when it cannot be read.
func ReadCPU() CPUTimes {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return CPUTimes{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return CPUTimes{}
	}
	return ParseCPULine(sc.Text())
}

// ParseCPULine reads the first line of /proc/stat: user nice system idle
// iowait irq softirq steal guest guest_nice, in clock ticks. Any other line
// reads as zero.
func ParseCPULine(line string) CPUTimes {
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return CPUTimes{}
	}
	var t CPUTimes
	for i, v := range fields[1:] {
		switch {
		case i == 3:
			t.Idle = atof(v)
		case i == 4:
			t.IOWait = atof(v)
		case i == 7:
			t.Steal = atof(v)
		case i >= 8: // guest time is already counted in user
		default:
			t.Busy += atof(v)
		}
	}
	return CPUTimes{Busy: t.Busy / ClockTicks, Idle: t.Idle / ClockTicks, IOWait: t.IOWait / ClockTicks, Steal: t.Steal / ClockTicks}
}

// SelfCPU is this process's user + system time, in seconds.
func SelfCPU() float64 {
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

// ProcessCPU is utime + stime of pid in seconds (with children, also of its
// reaped children); 0 when the process is gone.
func ProcessCPU(pid int, children bool) float64 {
	f := procStat(pid)
	// After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return 0
	}
	sum := atof(f[11]) + atof(f[12])
	if children {
		sum += atof(f[13]) + atof(f[14])
	}
	return sum / ClockTicks
}

// TreeCPU is the CPU of a parent and its children, in seconds: the live
// children's own time, and the parent's reaped children (for a PostgreSQL
// postmaster, the backends that exited).
func TreeCPU(root int) float64 {
	total := ProcessCPU(root, true)
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
		total += (atof(f[11]) + atof(f[12])) / ClockTicks
	}
	return total
}

// LoadAverage is /proc/loadavg: the 1, 5 and 15 minute load averages.
func LoadAverage() [3]float64 {
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

// Reading is one reading of the machine-wide figures.
type Reading struct {
	At  time.Time
	CPU CPUTimes // all cores, since boot
	// Self is this process's CPU time since it started, in seconds.
	Self float64
	// PagedOut is what the kernel's proactive reclaim has paged out, in
	// bytes (see [PagedOut]); PagedOK is false when there is no figure.
	PagedOut float64
	PagedOK  bool
}

// Read takes a reading.
func Read() Reading {
	r := Reading{At: time.Now(), Self: SelfCPU(), CPU: ReadCPU()}
	r.PagedOut, r.PagedOK = PagedOut(DAMONRoot)
	return r
}

// Interval is what the machine did between two readings.
type Interval struct {
	Seconds float64 // wall-clock time
	CPU     CPUTimes
	Self    float64
	// PagedOut is in bytes; PagedOK is false unless both readings had it.
	PagedOut float64
	PagedOK  bool
}

// Since returns what happened from a to r.
func (r Reading) Since(a Reading) Interval {
	return Interval{Seconds: r.At.Sub(a.At).Seconds(), CPU: r.CPU.Sub(a.CPU), Self: r.Self - a.Self,
		PagedOut: r.PagedOut - a.PagedOut, PagedOK: a.PagedOK && r.PagedOK}
}

// PageoutMiBPerSec is the rate the kernel paged out at over the interval,
// and false when there is no figure.
func (i Interval) PageoutMiBPerSec() (float64, bool) {
	if !i.PagedOK || i.Seconds <= 0 {
		return 0, false
	}
	return i.PagedOut / (1 << 20) / i.Seconds, true
}

func atof(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
