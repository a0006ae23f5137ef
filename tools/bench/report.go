package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The bar of issue 8, for this 2-core machine.
const (
	barAcceptRatio = 0.8  // accept throughput / pgbench ceiling, same concurrency
	barE2ERatio    = 0.4  // creates/s to final / pgbench ceiling
	barAcceptP99   = 25.0 // ms, at concurrency 32
	barReplayP99   = 5.0  // ms
	barBytesPerKey = 512  // bytes per key record
)

// checkBar holds the run's figures against the bar.
func checkBar(r *Results) []Check {
	var out []Check
	for _, a := range r.Accept {
		if a.RatioToCeiling > 0 {
			out = append(out, Check{Name: fmt.Sprintf("accept / ceiling at concurrency %d", a.Concurrency),
				Measured: a.RatioToCeiling, Bar: barAcceptRatio, Unit: "ratio"})
		}
		if a.Concurrency == 32 {
			note := hostNote(a.CPU, nil)
			for _, c := range r.Ceiling {
				if c.Concurrency == 32 && c.Latency.P99 > 0 {
					note = fmt.Sprintf("pgbench's own p99 %s ms; %s", f2(c.Latency.P99), note)
					break
				}
			}
			out = append(out, Check{Name: "accept p99 at concurrency 32", Measured: a.Latency.P99, Bar: barAcceptP99, Unit: "ms", AtMost: true,
				Note: note})
		}
	}
	for _, e := range r.EndToEnd {
		if e.RatioToCeiling > 0 {
			out = append(out, Check{Name: fmt.Sprintf("end to end / ceiling, simulator %g ms", e.SimLatencyMs),
				Measured: e.RatioToCeiling, Bar: barE2ERatio, Unit: "ratio",
				Note: e2eCeilingNote(e)})
		}
	}
	for _, rp := range r.Replays {
		if rp.Paced.Latency.Count > 0 {
			out = append(out, Check{Name: fmt.Sprintf("replay p99 with %s keys, at %g/s", count(rp.Keys), rp.Paced.Rate),
				Measured: rp.Paced.Latency.P99, Bar: barReplayP99, Unit: "ms", AtMost: true,
				Note: hostNote(rp.Paced.CPU, rp.Paced.StartLateness)})
		}
	}
	if r.Store != nil && r.Store.BytesPerRecord > 0 {
		out = append(out, Check{Name: "bytes per key record", Measured: r.Store.BytesPerRecord, Bar: barBytesPerKey, Unit: "B", AtMost: true,
			Note: fmt.Sprintf("%s records, after VACUUM", count(int(r.Store.Rows)))})
	}
	for i := range out {
		c := &out[i]
		c.Pass = c.Measured >= c.Bar
		if c.AtMost {
			c.Pass = c.Measured <= c.Bar
		}
	}
	return out
}

// hostNote says what the machine did to a latency check's load besides our
// work: how late the load generator took up its scheduled starts (paced
// loads), the cores the host stole, and what the kernel's proactive reclaim
// paged out. A p99 on a shared VM follows these (docs/benchmarks.md).
func hostNote(c CPU, late *Latency) string {
	var parts []string
	if late != nil {
		parts = append(parts, "started late by p99 "+f2(late.P99)+" ms")
	}
	parts = append(parts, "host stole "+f2(c.Steal)+" cores")
	if c.Pageout != nil {
		parts = append(parts, "kernel paged out "+f1(*c.Pageout)+" MiB/s")
	}
	return strings.Join(parts, ", ")
}

// count writes 10000 as 10 k and 1000000 as 1 M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%d M", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%d k", n/1000)
	}
	return fmt.Sprint(n)
}

// Write writes DIR/<date>.json, .md and .png and returns their paths.
func Write(dir string, r *Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	base := filepath.Join(dir, r.Date)
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(base+".json", append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(base+".md", []byte(Markdown(r)), 0o644); err != nil {
		return nil, err
	}
	files := []string{base + ".json", base + ".md"}
	if len(r.Accept) > 0 || len(r.Ceiling) > 0 {
		if err := Chart(base+".png", r); err != nil {
			return files, err
		}
		files = append(files, base+".png")
	}
	return files, nil
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// waitsLine is the top waits of a load, for a table cell.
func waitsLine(d DB, n int) string {
	var parts []string
	for i, w := range d.Waits {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", w.Name, w.Share*100))
	}
	return strings.Join(parts, "; ")
}

// Markdown is the report's table, as the README shows it.
func Markdown(r *Results) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := r.Machine
	p("### Benchmark of %s (%s run, %.0f s)\n\n", r.Date, r.Mode, r.Seconds)
	p("- Machine: %d × %s, %.1f GiB, Linux %s; %s; %s.\n", m.CPUs, m.CPUModel, m.MemoryGiB, m.Kernel, m.GoVersion, firstWords(m.PostgreSQL, 2))
	p("- Server: %s; synchronous_commit=%s, fsync=%s, wal_sync_method=%s, shared_buffers=%s.\n",
		m.Server, m.Settings["synchronous_commit"], m.Settings["fsync"], m.Settings["wal_sync_method"], m.Settings["shared_buffers"])
	if m.ProactiveReclaim != "" {
		p("- The kernel reclaims memory on its own (DAMON): %s. It pages out parts of PostgreSQL's shared buffers that stay idle, which stalls the backends that map them (docs/benchmarks.md); what it paged out during each load is in the replay table and beside the bar's latency checks.\n", m.ProactiveReclaim)
	}
	p("- Load average (1 min) %.1f at the start, %.1f at the end: the machine's %d cores are shared with whatever else runs.\n",
		m.LoadAverageStart[0], m.LoadAverageEnd[0], m.CPUs)
	p("- Command: `%s`. Each load runs %.0f s after a %.0f s warm-up, closed loop; at each concurrency the ceiling and the accept alternate in %d rounds; accept loads repeat an earlier key and body in %.0f%% of requests.\n",
		r.Command, r.Setup.DurationSeconds, r.Setup.WarmupSeconds, r.Setup.Rounds, r.Setup.RepeatShare*100)
	p("- Shared commits: ACCEPT_BATCH=%d, WORKER_BATCH=%d (64 is the default; 0 is one transaction per accept or job).\n\n", r.Setup.AcceptBatch, r.Setup.WorkerBatch)

	if len(r.Ceiling) > 0 || len(r.Accept) > 0 {
		p("**Accept against the ceiling** (pgbench: BEGIN; key row; intent row; COMMIT, same concurrency, same database)\n\n")
		p("| concurrency | ceiling tps | ceiling p50 / p99 ms | accept req/s | accept p50 / p99 ms | accept / ceiling | CPU cores: client · api · postgres | busy backends (accept) |\n")
		p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
		for _, c := range r.Setup.Concurrency {
			var ce *PgbenchRun
			var ac *LoadRun
			for i := range r.Ceiling {
				if r.Ceiling[i].Concurrency == c {
					ce = &r.Ceiling[i]
				}
			}
			for i := range r.Accept {
				if r.Accept[i].Concurrency == c {
					ac = &r.Accept[i]
				}
			}
			row := []string{fmt.Sprint(c), "–", "–", "–", "–", "–", "–", "–"}
			if ce != nil {
				row[1], row[2] = f0(ce.TPS), f2(ce.Latency.P50)+" / "+f2(ce.Latency.P99)
			}
			if ac != nil {
				row[3], row[4] = f0(ac.PerSec), f2(ac.Latency.P50)+" / "+f2(ac.Latency.P99)
				if ac.RatioToCeiling > 0 {
					row[5] = f2(ac.RatioToCeiling)
				}
				row[6] = fmt.Sprintf("%s · %s · %s", f2(ac.CPU.Client), f2(ac.CPU.API), f2(ac.CPU.Postgres))
				row[7] = waitsLine(ac.DB, 3)
			}
			p("| %s |\n", strings.Join(row, " | "))
		}
		p("\n")
	}
	if len(r.EndToEnd) > 0 {
		paced := "back to back"
		if r.Setup.E2ERate > 0 {
			paced = fmt.Sprintf("paced at %g/s", r.Setup.E2ERate)
		}
		p("**End to end** (api + 1 worker, WORKER_CONCURRENCY=%d, + simulator; %s creates at concurrency %d, %s; created_at → completed_at in the database)\n\n", r.Setup.WorkerConcurrency,
			count(r.Setup.E2ECreates), r.Setup.E2EConcurrency, paced)
		p("| simulator latency | submitted /s | creates/s to final | 202 → final p50 / p90 / p99 / max ms | / ceiling | CPU cores: api · worker · postgres | CPU µs per label: client · api · worker · carrier · postgres · machine |\n")
		p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, e := range r.EndToEnd {
			ratio := "–"
			if e.RatioToCeiling > 0 {
				ratio = fmt.Sprintf("%s (%s)", f2(e.RatioToCeiling), e2eCeilingNote(e))
			}
			u := e.CPUPerLabel
			p("| %g ms | %s | %s | %s / %s / %s / %s | %s | %s · %s · %s | %s · %s · %s · %s · %s · %s |\n", e.SimLatencyMs, f0(e.Submit.PerSec), f0(e.CreatesPerSec),
				f0(e.ToFinal.P50), f0(e.ToFinal.P90), f0(e.ToFinal.P99), f0(e.ToFinal.Max), ratio, f2(e.CPU.API), f2(e.CPU.Worker), f2(e.CPU.Postgres),
				f0(u.Client), f0(u.API), f0(u.Worker), f0(u.Carrier), f0(u.Postgres), f0(u.Machine))
		}
		p("\n")
	}
	if len(r.Replays) > 0 {
		p("**Replays** (completed keys, each request a uniformly random filled key; %d clients)\n\n", r.Setup.ReplayConcurrency)
		p("| keys in the store | p50 / p99 ms at %g/s | of which the start was late, p50 / p99 ms | at %g/s: CPU cores of the machine · stolen by the host · MiB/s paged out by the kernel | back to back: replays/s | back to back: p50 / p99 ms | fill (COPY) rows/s |\n", r.Setup.ReplayRate, r.Setup.ReplayRate)
		p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, rp := range r.Replays {
			late := "–"
			if l := rp.Paced.StartLateness; l != nil {
				late = f2(l.P50) + " / " + f2(l.P99)
			}
			paged := "–"
			if v := rp.Paced.CPU.Pageout; v != nil {
				paged = f1(*v)
			}
			p("| %s | %s / %s | %s | %s · %s · %s | %s | %s / %s | %s |\n", count(rp.Keys), f2(rp.Paced.Latency.P50), f2(rp.Paced.Latency.P99), late,
				f2(rp.Paced.CPU.Machine), f2(rp.Paced.CPU.Steal), paged,
				f0(rp.Load.PerSec), f2(rp.Load.Latency.P50), f2(rp.Load.Latency.P99), f0(rp.FillPerSec))
		}
		p("\n")
	}
	if r.Store != nil || r.Reconcile != nil {
		p("**The store and the batch jobs**\n\n")
		p("| bytes per key record (heap · indexes · TOAST) | purge keys/s (batch 1000, with tombstones) | reconciliation lines/s |\n")
		p("| ---: | ---: | ---: |\n")
		cells := []string{"–", "–", "–"}
		if s := r.Store; s != nil {
			cells[0] = fmt.Sprintf("%s (%s · %s · %s) at %s records", f0(s.BytesPerRecord), f0(s.HeapPerRecord), f0(s.IndexPerRecord), f0(s.ToastPerRecord), count(int(s.Rows)))
			if s.Purge.Deleted > 0 {
				cells[1] = fmt.Sprintf("%s (%s keys in %s s)", f0(s.Purge.KeysPerSec), count(int(s.Purge.Deleted)), f1(s.Purge.Seconds))
			}
		}
		if c := r.Reconcile; c != nil && c.LinesPerSec > 0 {
			cells[2] = fmt.Sprintf("%s (%s lines in %s s)", f0(c.LinesPerSec), count(c.Lines), f1(c.Seconds))
		}
		p("| %s |\n\n", strings.Join(cells, " | "))
	}
	if pr := r.Profile; pr != nil && pr.CPUSeconds > 0 {
		p("**API CPU profile** (apiprof, concurrency %d, %.0f req/s): %.2f cores, %.0f µs of CPU per request; %s.\n\n",
			pr.Concurrency, pr.PerSec, pr.CoresUsed, pr.MicrosPerRequest, sharesLine(pr.Categories, 6))
	}
	if len(r.Bar) > 0 {
		p("**The bar** (issue 8)\n\n| check | measured | bar | | conditions |\n| --- | ---: | ---: | --- | --- |\n")
		for _, c := range r.Bar {
			op := "≥"
			if c.AtMost {
				op = "≤"
			}
			mark := "pass"
			if !c.Pass {
				mark = "**miss**"
			}
			val := fmt.Sprintf("%.3f", c.Measured) // a ratio: 0.797 is not 0.80
			if c.Unit != "ratio" {
				val = f2(c.Measured) + " " + c.Unit
			}
			p("| %s | %s | %s %g | %s | %s |\n", c.Name, val, op, c.Bar, mark, c.Note)
		}
		p("\n")
	}
	if len(r.Errors) > 0 {
		p("Failed phases:\n\n")
		for _, e := range r.Errors {
			p("- %s\n", strings.ReplaceAll(e, "\n", " "))
		}
		p("\n")
	}
	return b.String()
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}

// e2eCeilingNote says which ceiling an end-to-end run was held to.
func e2eCeilingNote(e E2ERun) string {
	if e.Ceiling != nil && e.CeilingAfter != nil {
		return fmt.Sprintf("ceiling at concurrency %d: %s tps, the mean of %s right before and %s right after", e.CeilingConcurrency,
			f0(e.CeilingTPS), f0(e.Ceiling.TPS), f0(e.CeilingAfter.TPS))
	}
	return fmt.Sprintf("ceiling at concurrency %d", e.CeilingConcurrency)
}
