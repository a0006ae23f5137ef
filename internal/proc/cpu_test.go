package proc

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// /proc/stat's first line: busy is user, nice, system, irq and softirq;
// idle, iowait and guest time are not added, and steal comes apart.
func TestCPULine(t *testing.T) {
	t.Parallel()
	busy, steal := parseCPULine("cpu  213227 5 100091 1119612 6793 7 19944 13605 300 9")
	require.InDelta(t, float64(213227+5+100091+7+19944)/100, busy, 1e-9)
	require.InDelta(t, 136.05, steal, 1e-9)
	busy, steal = parseCPULine("intr 1 2 3")
	require.Zero(t, busy)
	require.Zero(t, steal)
}

// This test process's CPU time as /proc and getrusage see it, once it has
// used at least one clock tick: its tree has at least its own, and a process
// that does not exist has none.
func TestProcessCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	pid := os.Getpid()
	for ProcessCPU(pid, false) == 0 { // spins until the kernel counts a tick
	}
	own := ProcessCPU(pid, true)
	require.Positive(t, own)
	require.Positive(t, SelfCPU())
	require.GreaterOrEqual(t, TreeCPU(pid), own)
	require.Zero(t, ProcessCPU(0, true))
	require.Zero(t, ProcessCPU(-1, false))

	busy, _ := MachineCPU()
	require.Positive(t, busy, "the machine has done some work since boot")
}

// LoadAverage reads the first three fields of /proc/loadavg, which the
// kernel rewrites every few seconds: the file is read before and after, until
// both reads agree.
func TestLoadAverage(t *testing.T) {
	before, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	for {
		got := LoadAverage()
		after, err := os.ReadFile("/proc/loadavg")
		require.NoError(t, err)
		if string(after) != string(before) {
			before = after
			continue
		}
		var want [3]float64
		for i, f := range strings.Fields(string(after))[:3] {
			want[i], err = strconv.ParseFloat(f, 64)
			require.NoError(t, err)
		}
		require.Equal(t, want, got)
		return
	}
}
