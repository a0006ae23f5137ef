package proc

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// CPU time and load from /proc, for measuring what processes and the machine
// do while a load runs. Every CPU figure is in seconds and cumulative (since
// boot, or since a process started): the difference of two readings is what
// happened between them. Where /proc cannot be read (another system, a
// process that is gone) a figure reads as zero.

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// MachineCPU is the CPU time of all cores since boot, from the first line of
// /proc/stat: busy (see parseCPULine) and what the host of a virtual machine
// stole.
func MachineCPU() (busy, steal float64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if sc.Scan() {
		busy, steal = parseCPULine(sc.Text())
	}
	return busy, steal
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

// SelfCPU is this process's user + system time.
func SelfCPU() float64 {
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

// ProcessCPU is the user + system time of pid (with children, also of its
// reaped children); 0 when the process is gone or pid is 0.
func ProcessCPU(pid int, children bool) float64 {
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

// TreeCPU is the CPU time of a parent and its children: the parent's own,
// its live children's own, and its reaped children's (for a PostgreSQL
// postmaster, the backends that exited).
func TreeCPU(root int) float64 {
	total := ProcessCPU(root, true)
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

// LoadAverage is /proc/loadavg: the 1, 5 and 15 minute load averages.
func LoadAverage() [3]float64 {
	var out [3]float64
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i] = atof(f[i])
	}
	return out
}

// atof is s as a number, 0 when it is none.
func atof(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
