package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The bar: each check a ratio of two figures of one run, so that it holds
// or misses on any host alike.
const (
	barRate         = 400.0 // the paced phase held to the bar, creates/s
	barE2ELatency   = 50.0  // ms: the saturated end-to-end run it is held to (the paced phases' simulator latency)
	barCPUToSat     = 1.5   // machine CPU per label paced / saturated end to end, at most
	barP99ToPgbench = 2.0   // the 202's p99 paced / pgbench's p99 paced at the same rate, at most
)

// checkBar holds the run's figures against the bar.
func checkBar(r *Results) []Check {
	var out []Check
	i := slices.IndexFunc(r.Paced, func(p PacedRun) bool { return p.Rate == barRate })
	if i < 0 {
		return nil
	}
	p := r.Paced[i]
	if j := slices.IndexFunc(r.EndToEnd, func(e E2ERun) bool { return e.SimLatencyMs == barE2ELatency }); j >= 0 {
		e := r.EndToEnd[j]
		if p.CPUPerLabel.Machine > 0 && e.CPUPerLabel.Machine > 0 {
			out = append(out, Check{Name: fmt.Sprintf("machine CPU per label at %g/s / saturated end to end, simulator %g ms", barRate, barE2ELatency),
				Measured: round3(p.CPUPerLabel.Machine / e.CPUPerLabel.Machine), Bar: barCPUToSat,
				Note: fmt.Sprintf("%s µs (%s commits, %s WAL flushes a label) against %s µs (%s, %s) at %s creates/s",
					f0(p.CPUPerLabel.Machine), f2(p.CommitsPerLabel), f2(p.WALFlushesPerLabel),
					f0(e.CPUPerLabel.Machine), f2(e.CommitsPerLabel), f2(e.WALFlushesPerLabel), f0(e.CreatesPerSec))})
		}
	}
	if pg := p.Pgbench; pg != nil && pg.Latency.P99 > 0 && p.Submit.Latency.P99 > 0 {
		out = append(out, Check{Name: fmt.Sprintf("the 202's p99 at %g/s / pgbench's p99 at %g/s", barRate, barRate),
			Measured: round3(p.Submit.Latency.P99 / pg.Latency.P99), Bar: barP99ToPgbench,
			Note: fmt.Sprintf("%s ms against %s ms, both from the scheduled start; host stole %s cores", f2(p.Submit.Latency.P99), f2(pg.Latency.P99), f2(p.CPU.Steal))})
	}
	for i := range out {
		out[i].Pass = out[i].Measured <= out[i].Bar
	}
	return out
}

// ceilingOf is the ceiling measured at concurrency c, or nil.
func ceilingOf(r *Results, c int) *PgbenchRun {
	for i := range r.Ceiling {
		if r.Ceiling[i].Concurrency == c {
			return &r.Ceiling[i]
		}
	}
	return nil
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
	if len(r.Accept) > 0 || len(r.AcceptLive) > 0 || len(r.Ceiling) > 0 || len(r.Paced) > 0 {
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
	// th writes a table's header row and its alignment row: every column
	// right-aligned but the last left ones.
	th := func(header string, left int) {
		n := strings.Count(header, "|") - 1
		p("%s\n|%s%s\n", header, strings.Repeat(" ---: |", n-left), strings.Repeat(" --- |", left))
	}
	m := r.Machine
	p("### Benchmark of %s (%s run, %.0f s)\n\n", r.Date, r.Mode, r.Seconds)
	p("- Machine: %d × %s, %.1f GiB, Linux %s; %s; %s.\n", m.CPUs, m.CPUModel, m.MemoryGiB, m.Kernel, m.GoVersion, firstWords(m.PostgreSQL, 2))
	p("- Server: %s; synchronous_commit=%s, fsync=%s, wal_sync_method=%s, shared_buffers=%s.\n",
		m.Server, m.Settings["synchronous_commit"], m.Settings["fsync"], m.Settings["wal_sync_method"], m.Settings["shared_buffers"])
	p("- Load average (1 min) %.1f at the start, %.1f at the end: the machine's %d cores are shared with whatever else runs.\n",
		m.LoadAverageStart[0], m.LoadAverageEnd[0], m.CPUs)
	p("- Command: `%s`. Each load runs %.0f s after a %.0f s warm-up, closed loop; at each concurrency the ceiling and the accept alternate in %d rounds; accept loads repeat an earlier key and body in %.0f%% of requests.\n",
		r.Command, r.Setup.DurationSeconds, r.Setup.WarmupSeconds, r.Setup.Rounds, r.Setup.RepeatShare*100)
	p("- The api and the worker run as deployed: LOG_LEVEL=info, GOGC=%d, every other setting its default.\n\n", r.Setup.GOGC)

	if len(r.Ceiling) > 0 || len(r.Accept) > 0 {
		p("**Accept against the ceiling, worker stopped** (pgbench: BEGIN; key row; intent row; COMMIT, same concurrency, same database)\n\n")
		th("| concurrency | ceiling tps | ceiling p50 / p99 ms | accept req/s | accept p50 / p99 ms | accept / ceiling | p99 / ceiling p99 | CPU cores: client · api · postgres | busy backends (accept) |", 1)
		for _, c := range r.Setup.Concurrency {
			row := []string{fmt.Sprint(c), "–", "–", "–", "–", "–", "–", "–", "–"}
			if ce := ceilingOf(r, c); ce != nil {
				row[1], row[2] = f0(ce.TPS), f2(ce.Latency.P50)+" / "+f2(ce.Latency.P99)
			}
			if i := slices.IndexFunc(r.Accept, func(a LoadRun) bool { return a.Concurrency == c }); i >= 0 {
				ac := &r.Accept[i]
				row[3], row[4] = f0(ac.PerSec), f2(ac.Latency.P50)+" / "+f2(ac.Latency.P99)
				row[5], row[6] = ratioCell(ac.RatioToCeiling), ratioCell(ac.P99ToCeiling)
				row[7] = fmt.Sprintf("%s · %s · %s", f2(ac.CPU.Client), f2(ac.CPU.API), f2(ac.CPU.Postgres))
				row[8] = waitsLine(ac.DB, 3)
			}
			p("| %s |\n", strings.Join(row, " | "))
		}
		p("\n")
	}
	if len(r.AcceptLive) > 0 {
		p("**Accept with the pipeline live** (a worker, WORKER_CONCURRENCY=%d, and the simulator at 0 ms running and draining while the API accepts; the same rounds and ceiling)\n\n",
			r.Setup.WorkerConcurrency)
		th("| concurrency | req/s | p50 / p99 ms | / ceiling | p99 / ceiling p99 | made final /s | CPU cores: client · api · worker · simulator · postgres | busy backends |", 1)
		for _, a := range r.AcceptLive {
			p("| %d | %s | %s / %s | %s | %s | %s | %s · %s · %s · %s · %s | %s |\n", a.Concurrency, f0(a.PerSec), f2(a.Latency.P50), f2(a.Latency.P99),
				ratioCell(a.RatioToCeiling), ratioCell(a.P99ToCeiling), f0(a.DrainedPerSec),
				f2(a.CPU.Client), f2(a.CPU.API), f2(a.CPU.Worker), f2(a.CPU.Carrier), f2(a.CPU.Postgres), waitsLine(a.DB, 3))
		}
		p("\n")
	}
	if len(r.EndToEnd) > 0 {
		p("**End to end** (api + 1 worker, WORKER_CONCURRENCY=%d, + simulator; %s creates at concurrency %d, back to back; created_at → completed_at in the database)\n\n", r.Setup.WorkerConcurrency,
			count(r.Setup.E2ECreates), r.Setup.E2EConcurrency)
		th("| simulator latency | submitted /s | creates/s to final | 202 → final p50 / p90 / p99 / max ms | / ceiling | CPU cores: api · worker · postgres | CPU µs per label: client · api · worker · carrier · postgres · ours · machine | commits · WAL flushes per label |", 0)
		for _, e := range r.EndToEnd {
			ratio := "–"
			if e.RatioToCeiling > 0 {
				ratio = fmt.Sprintf("%s (%s)", f2(e.RatioToCeiling), e2eCeilingNote(e))
			}
			p("| %g ms | %s | %s | %s / %s / %s / %s | %s | %s · %s · %s | %s | %s · %s |\n", e.SimLatencyMs, f0(e.Submit.PerSec), f0(e.CreatesPerSec),
				f0(e.ToFinal.P50), f0(e.ToFinal.P90), f0(e.ToFinal.P99), f0(e.ToFinal.Max), ratio, f2(e.CPU.API), f2(e.CPU.Worker), f2(e.CPU.Postgres),
				perLabelCell(e.CPUPerLabel), f2(e.CommitsPerLabel), f2(e.WALFlushesPerLabel))
		}
		p("\n")
	}
	if len(r.Paced) > 0 {
		p("**Paced** (creates open loop at a rate for %.0f s, Poisson arrivals, latency from each scheduled start, through api + 1 worker + simulator at %g ms; pgbench -R runs the ceiling's transaction at the same rate, clients and length)\n\n",
			r.Setup.PacedSeconds, r.Paced[0].SimLatencyMs)
		th("| rate /s | clients | 202s /s (of 2,000/s) | start late p50 / p99 ms | 202 p50 / p99 ms | pgbench tps, p50 / p99 ms | 202 p99 / pgbench p99 | 202 → final p50 / p99 ms | CPU µs per label: client · api · worker · carrier · postgres · ours · machine | commits · WAL flushes per label | pgbench machine µs per tx |", 0)
		for _, pr := range r.Paced {
			late, pg, ratio := "–", "–", "–"
			if l := pr.Submit.StartLateness; l != nil {
				late = f2(l.P50) + " / " + f2(l.P99)
			}
			if g := pr.Pgbench; g != nil {
				pg = fmt.Sprintf("%s, %s / %s", f0(g.TPS), f2(g.Latency.P50), f2(g.Latency.P99))
				if g.Latency.P99 > 0 {
					ratio = f2(pr.Submit.Latency.P99 / g.Latency.P99)
				}
			}
			p("| %g | %d | %s (%s) | %s | %s / %s | %s | %s | %s / %s | %s | %s · %s | %s |\n", pr.Rate, pr.Clients, f0(pr.Submit.PerSec), f2(pr.ShareOfPeak), late,
				f2(pr.Submit.Latency.P50), f2(pr.Submit.Latency.P99), pg, ratio, f0(pr.ToFinal.P50), f0(pr.ToFinal.P99),
				perLabelCell(pr.CPUPerLabel), f2(pr.CommitsPerLabel), f2(pr.WALFlushesPerLabel), f0(pr.PgbenchCPUPerTx))
		}
		p("\n")
	}
	if len(r.EndToEnd) > 0 && r.EndToEnd[0].ReplaysAfter != nil {
		p("**Replays right after each burst** (%d random keys of the burst, just final, replayed by %d clients back to back; then pgbench reads as many key records by primary key at %d)\n\n",
			r.Setup.BurstReplays, r.Setup.BurstConcurrency, r.Setup.BurstConcurrency)
		th("| simulator latency | replays/s | p50 / p99 / max ms | p99 / p50 | primary-key SELECT p50 / p99 ms | SELECT p99 / p50 | replay p99 / SELECT p99 |", 0)
		for _, e := range r.EndToEnd {
			rp := e.ReplaysAfter
			if rp == nil {
				continue
			}
			sel, selTail := "–", "–"
			if s := e.SelectAfter; s != nil && s.Latency.Count > 0 {
				sel = f2(s.Latency.P50) + " / " + f2(s.Latency.P99)
				if s.Latency.P50 > 0 {
					selTail = f1(s.Latency.P99 / s.Latency.P50)
				}
			}
			p("| %g ms | %s | %s / %s / %s | %s | %s | %s | %s |\n", e.SimLatencyMs, f0(rp.PerSec), f2(rp.Latency.P50), f2(rp.Latency.P99), f2(rp.Latency.Max),
				f1(e.ReplayP99OverP50), sel, selTail, ratioCell(e.ReplayP99OverSelectP99))
		}
		p("\n")
	}
	if len(r.Replays) > 0 {
		p("**Replays** (completed keys, each request a uniformly random filled key; %d clients)\n\n", r.Setup.ReplayConcurrency)
		th(fmt.Sprintf("| keys in the store | p50 / p99 ms at %g/s | of which the start was late, p50 / p99 ms | at %g/s: CPU cores of the machine · stolen by the host | back to back: replays/s | back to back: p50 / p99 ms | fill (COPY) rows/s |", r.Setup.ReplayRate, r.Setup.ReplayRate), 0)
		for _, rp := range r.Replays {
			late := "–"
			if l := rp.Paced.StartLateness; l != nil {
				late = f2(l.P50) + " / " + f2(l.P99)
			}
			p("| %s | %s / %s | %s | %s · %s | %s | %s / %s | %s |\n", count(rp.Keys), f2(rp.Paced.Latency.P50), f2(rp.Paced.Latency.P99), late,
				f2(rp.Paced.CPU.Machine), f2(rp.Paced.CPU.Steal),
				f0(rp.Load.PerSec), f2(rp.Load.Latency.P50), f2(rp.Load.Latency.P99), f0(rp.FillPerSec))
		}
		p("\n")
	}
	if s := r.Store; s != nil {
		p("**The store**\n\n")
		th("| bytes per key record (heap · indexes · TOAST) | purge keys/s (batch 1000, with tombstones) |", 0)
		purge := "–"
		if s.Purge.Deleted > 0 {
			purge = fmt.Sprintf("%s (%s keys in %s s)", f0(s.Purge.KeysPerSec), count(int(s.Purge.Deleted)), f1(s.Purge.Seconds))
		}
		p("| %s (%s · %s · %s) at %s records | %s |\n\n", f0(s.BytesPerRecord), f0(s.HeapPerRecord), f0(s.IndexPerRecord), f0(s.ToastPerRecord), count(int(s.Rows)), purge)
	}
	if len(r.Bar) > 0 {
		verdict := "met"
		p("**The bar**\n\n| check | measured | bar | | conditions |\n| --- | ---: | ---: | --- | --- |\n")
		for _, c := range r.Bar {
			mark := "pass"
			if !c.Pass {
				mark, verdict = "**miss**", "missed"
			}
			// A ratio to three places: 0.797 is not 0.80.
			p("| %s | %.3f | ≤ %g | %s | %s |\n", c.Name, c.Measured, c.Bar, mark, c.Note)
		}
		p("\nThe bar is %s.\n\n", verdict)
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

// perLabelCell is CPU µs per label by party, for a table cell.
func perLabelCell(u CPUPerLabel) string {
	return strings.Join([]string{f0(u.Client), f0(u.API), f0(u.Worker), f0(u.Carrier), f0(u.Postgres), f0(u.Ours), f0(u.Machine)}, " · ")
}

// ratioCell writes a ratio for a table cell, or a dash when there is none.
func ratioCell(v float64) string {
	if v <= 0 {
		return "–"
	}
	return f2(v)
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
	note := fmt.Sprintf("ceiling at concurrency %d: %s tps", e.CeilingConcurrency, f0(e.CeilingTPS))
	if e.Ceiling != nil && e.CeilingAfter != nil {
		note += fmt.Sprintf(", the mean of %s right before and %s right after", f0(e.Ceiling.TPS), f0(e.CeilingAfter.TPS))
	}
	return note
}
