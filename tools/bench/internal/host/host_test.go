package host

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// /proc/stat's first line: busy is user, nice, system, irq and softirq;
// idle, iowait and guest time are not added, and steal comes apart.
func TestCPULine(t *testing.T) {
	c := ParseCPULine("cpu  213227 5 100091 1119612 6793 7 19944 13605 300 9")
	require.InDelta(t, float64(213227+5+100091+7+19944)/100, c.Busy, 1e-9)
	require.InDelta(t, 136.05, c.Steal, 1e-9)
	require.InDelta(t, 11196.12, c.Idle, 1e-9)
	require.InDelta(t, 67.93, c.IOWait, 1e-9)
	require.InDelta(t, float64(213227+5+100091+1119612+6793+7+19944+13605)/100, c.Total(), 1e-6, "every state but guest time")
	c = ParseCPULine("intr 1 2 3")
	require.Zero(t, c.Busy)
	require.Zero(t, c.Steal)
}

// Two readings make an interval: the differences, and the pageout rate only
// when both readings have the figure.
func TestSince(t *testing.T) {
	t.Parallel()
	at := time.Now()
	a := Reading{At: at, CPU: CPUTimes{Busy: 5, Steal: 10}, Self: 1, PagedOut: 1 << 20, PagedOK: true}
	b := Reading{At: at.Add(2 * time.Second), CPU: CPUTimes{Busy: 8, Steal: 11}, Self: 1.5, PagedOut: 5 << 20, PagedOK: true}
	d := b.Since(a)
	require.InDelta(t, 2, d.Seconds, 1e-9)
	require.InDelta(t, 3, d.CPU.Busy, 1e-9)
	require.InDelta(t, 1, d.CPU.Steal, 1e-9)
	require.InDelta(t, 0.5, d.Self, 1e-9)
	v, ok := d.PageoutMiBPerSec()
	require.True(t, ok)
	require.InDelta(t, 2.0, v, 1e-9)
	b.PagedOK = false
	_, ok = b.Since(a).PageoutMiBPerSec()
	require.False(t, ok)
}

// The DAMON schemes the kernel runs, read from its sysfs tree: a running
// kdamond's pageout scheme is described; a kdamond that is off, and a tree
// that is not there, describe nothing.
func TestProactiveReclaim(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(path, v string) {
		t.Helper()
		p := filepath.Join(root, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(v+"\n"), 0o644))
	}
	ctx := "kdamonds/0/contexts/0/"
	write("kdamonds/nr_kdamonds", "2")
	write("kdamonds/0/state", "on")
	write(ctx+"operations", "paddr")
	write(ctx+"monitoring_attrs/intervals/aggr_us", "5000000")
	write(ctx+"schemes/nr_schemes", "1")
	write(ctx+"schemes/0/action", "pageout")
	write(ctx+"schemes/0/access_pattern/age/min", "12")
	write(ctx+"schemes/0/quotas/bytes", "134217728")
	write(ctx+"schemes/0/quotas/reset_interval_ms", "1000")
	write("kdamonds/1/state", "off")
	write("kdamonds/1/contexts/0/operations", "vaddr")
	write("kdamonds/1/contexts/0/schemes/0/action", "pageout")
	require.Equal(t, "paddr pageout of memory idle ≥ 60 s, at most 128 MiB per 1 s", ProactiveReclaim(root))

	// What the pageout schemes paged out: the kernel refreshes the stats
	// when update_schemes_stats is written to the kdamond's state.
	write(ctx+"schemes/0/stats/sz_applied", "3145728")
	write(ctx+"schemes/1/action", "stat")
	write(ctx+"schemes/1/stats/sz_applied", "999")
	write("kdamonds/1/contexts/0/schemes/0/stats/sz_applied", "777")
	b, ok := PagedOut(root)
	require.True(t, ok)
	require.InDelta(t, 3145728, b, 0)
	state, err := os.ReadFile(filepath.Join(root, "kdamonds/0/state"))
	require.NoError(t, err)
	require.Equal(t, "update_schemes_stats\n", string(state))

	write("kdamonds/0/state", "off")
	require.Empty(t, ProactiveReclaim(root))
	_, ok = PagedOut(root)
	require.False(t, ok)
	require.Empty(t, ProactiveReclaim(filepath.Join(root, "missing")))
	_, ok = PagedOut(filepath.Join(root, "missing"))
	require.False(t, ok)
}
