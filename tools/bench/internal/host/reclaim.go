package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DAMONRoot is where the kernel's DAMON sysfs interface lives.
const DAMONRoot = "/sys/kernel/mm/damon/admin"

// damonScheme is one scheme of a running kdamond.
type damonScheme struct {
	kdamond, context, dir string // their directories
	ops, action           string // "paddr", "pageout"
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

func readNum(path string) float64 { return atof(readTrim(path)) }

// numbered returns dir's numbered subdirectories (kdamonds/0, …), in
// os.ReadDir's order.
func numbered(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// runningSchemes returns the schemes of the kdamonds under root whose state
// is "on" (none when root is missing).
func runningSchemes(root string) []damonScheme {
	var out []damonScheme
	for _, k := range numbered(filepath.Join(root, "kdamonds")) {
		if readTrim(filepath.Join(k, "state")) != "on" {
			continue
		}
		for _, c := range numbered(filepath.Join(k, "contexts")) {
			ops := readTrim(filepath.Join(c, "operations"))
			for _, s := range numbered(filepath.Join(c, "schemes")) {
				out = append(out, damonScheme{kdamond: k, context: c, dir: s, ops: ops, action: readTrim(filepath.Join(s, "action"))})
			}
		}
	}
	return out
}

// ProactiveReclaim describes the DAMON schemes that the kernel runs under
// root, one per running scheme ("paddr pageout of memory idle ≥ 60 s, at
// most 128 MiB per 1 s"), or "" when none runs. A VM's host may run DAMON
// to take back memory its guest leaves idle; it pages out cold parts of
// PostgreSQL's shared buffers too, and that stalls the backends that map
// them: a latency measured meanwhile says so.
func ProactiveReclaim(root string) string {
	var found []string
	for _, s := range runningSchemes(root) {
		d := s.ops + " " + s.action
		aggr := readNum(filepath.Join(s.context, "monitoring_attrs", "intervals", "aggr_us"))
		if age := readNum(filepath.Join(s.dir, "access_pattern", "age", "min")) * aggr / 1e6; age > 0 {
			d += fmt.Sprintf(" of memory idle ≥ %g s", age)
		}
		bytes, ms := readNum(filepath.Join(s.dir, "quotas", "bytes")), readNum(filepath.Join(s.dir, "quotas", "reset_interval_ms"))
		if bytes > 0 && ms > 0 {
			d += fmt.Sprintf(", at most %g MiB per %g s", bytes/(1<<20), ms/1000)
		}
		found = append(found, d)
	}
	return strings.Join(found, "; ")
}

// PagedOut returns the bytes that the running pageout schemes under root
// have paged out since they started (their stats' sz_applied), and false
// when none runs or their figures cannot be had. The kernel refreshes a
// kdamond's scheme stats only when asked, by writing update_schemes_stats to
// its state file: that needs root, changes no setting, and without it the
// figures are stale, so a failed request counts as no figures.
func PagedOut(root string) (float64, bool) {
	var total float64
	asked := map[string]bool{}
	ok := false
	for _, s := range runningSchemes(root) {
		if s.action != "pageout" {
			continue
		}
		if !asked[s.kdamond] {
			asked[s.kdamond] = true
			if err := os.WriteFile(filepath.Join(s.kdamond, "state"), []byte("update_schemes_stats\n"), 0); err != nil {
				return 0, false
			}
		}
		total += readNum(filepath.Join(s.dir, "stats", "sz_applied"))
		ok = true
	}
	return total, ok
}
