package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// damonRoot is where the kernel's DAMON sysfs interface lives.
const damonRoot = "/sys/kernel/mm/damon/admin"

// proactiveReclaim describes the DAMON schemes that the kernel runs under
// root, one per running scheme ("paddr pageout of memory idle ≥ 60 s, at
// most 128 MiB a second"), or "" when none runs. A VM's host may run DAMON
// to take back memory its guest leaves idle; it pages out cold parts of
// PostgreSQL's shared buffers too, and that stalls the backends that map
// them (docs/bench.md, "The third morning", Finding 14).
func proactiveReclaim(root string) string {
	read := func(parts ...string) string {
		b, err := os.ReadFile(filepath.Join(append([]string{root}, parts...)...))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	num := func(parts ...string) float64 {
		v, _ := strconv.ParseFloat(read(parts...), 64)
		return v
	}
	dirs := func(parts ...string) []string {
		entries, _ := os.ReadDir(filepath.Join(append([]string{root}, parts...)...))
		var out []string
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
				out = append(out, e.Name())
			}
		}
		sort.Strings(out)
		return out
	}
	var found []string
	for _, k := range dirs("kdamonds") {
		if read("kdamonds", k, "state") != "on" {
			continue
		}
		for _, c := range dirs("kdamonds", k, "contexts") {
			ctx := []string{"kdamonds", k, "contexts", c}
			ops := read(append(ctx, "operations")...)
			aggr := num(append(ctx, "monitoring_attrs", "intervals", "aggr_us")...)
			for _, s := range dirs(append(ctx, "schemes")...) {
				sc := append(ctx[:len(ctx):len(ctx)], "schemes", s)
				d := fmt.Sprintf("%s %s", ops, read(append(sc, "action")...))
				if age := num(append(sc, "access_pattern", "age", "min")...) * aggr / 1e6; age > 0 {
					d += fmt.Sprintf(" of memory idle ≥ %g s", age)
				}
				if bytes, ms := num(append(sc, "quotas", "bytes")...), num(append(sc, "quotas", "reset_interval_ms")...); bytes > 0 && ms > 0 {
					d += fmt.Sprintf(", at most %g MiB per %g s", bytes/(1<<20), ms/1000)
				}
				found = append(found, d)
			}
		}
	}
	return strings.Join(found, "; ")
}
