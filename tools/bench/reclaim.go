package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// damonRoot is where the kernel's DAMON sysfs interface lives.
const damonRoot = "/sys/kernel/mm/damon/admin"

// proactiveReclaim describes the DAMON schemes that the kernel runs under
// root, one per running scheme ("paddr pageout of memory idle ≥ 60 s, at
// most 128 MiB per 1 s"), or "" when none runs. A VM's host may run DAMON
// to take back memory its guest leaves idle; it pages out cold parts of
// PostgreSQL's shared buffers too, and that stalls the backends that map
// them (docs/bench.md, "The third morning", Finding 14).
func proactiveReclaim(root string) string {
	read := func(path string) string {
		b, _ := os.ReadFile(path)
		return strings.TrimSpace(string(b))
	}
	num := func(path string) float64 {
		v, _ := strconv.ParseFloat(read(path), 64)
		return v
	}
	// numbered returns dir's numbered subdirectories (kdamonds/0, …), in
	// os.ReadDir's order.
	numbered := func(dir string) []string {
		entries, _ := os.ReadDir(dir)
		var out []string
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
		return out
	}
	var found []string
	for _, k := range numbered(filepath.Join(root, "kdamonds")) {
		if read(filepath.Join(k, "state")) != "on" {
			continue
		}
		for _, c := range numbered(filepath.Join(k, "contexts")) {
			ops := read(filepath.Join(c, "operations"))
			aggr := num(filepath.Join(c, "monitoring_attrs", "intervals", "aggr_us"))
			for _, s := range numbered(filepath.Join(c, "schemes")) {
				d := ops + " " + read(filepath.Join(s, "action"))
				if age := num(filepath.Join(s, "access_pattern", "age", "min")) * aggr / 1e6; age > 0 {
					d += fmt.Sprintf(" of memory idle ≥ %g s", age)
				}
				bytes, ms := num(filepath.Join(s, "quotas", "bytes")), num(filepath.Join(s, "quotas", "reset_interval_ms"))
				if bytes > 0 && ms > 0 {
					d += fmt.Sprintf(", at most %g MiB per %g s", bytes/(1<<20), ms/1000)
				}
				found = append(found, d)
			}
		}
	}
	return strings.Join(found, "; ")
}
