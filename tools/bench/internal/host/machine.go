package host

import (
	"os"
	"runtime"
	"strings"
)

// Machine describes the machine the figures come from.
type Machine struct {
	CPUs      int
	CPUModel  string  // /proc/cpuinfo's first model name
	MemoryGiB float64 // MemTotal, not rounded
	Kernel    string
	GoVersion string
}

// Describe reads what /proc says about this machine; a field it cannot read
// stays empty.
func Describe() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
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
				m.MemoryGiB = atof(f[1]) / (1 << 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
