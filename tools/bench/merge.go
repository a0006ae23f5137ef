package main

import (
	"cmp"
	"slices"
	"strings"
)

// A load at one concurrency runs in rounds that alternate with the ceiling's
// (pgbench, accept, pgbench, accept…), so that both see the same machine:
// other work on the two cores comes and goes. The rounds are merged here.

func mergePgbench(parts []PgbenchRun) PgbenchRun {
	if len(parts) == 0 {
		return PgbenchRun{}
	}
	r := PgbenchRun{Concurrency: parts[0].Concurrency, Threads: parts[0].Threads, Rounds: len(parts)}
	var tpsSecs float64
	var lat []int64
	var cpus []weighted[CPU]
	var dbs []weighted[DB]
	for _, p := range parts {
		r.Error = cmp.Or(r.Error, p.Error)
		r.Seconds += p.Seconds
		r.Transactions += p.Transactions
		r.Failed += p.Failed
		tpsSecs += p.TPS * p.Seconds
		lat = append(lat, p.lat...)
		cpus = append(cpus, weighted[CPU]{p.CPU, p.Seconds})
		dbs = append(dbs, weighted[DB]{p.DB, p.Seconds})
	}
	if r.Seconds > 0 {
		r.TPS = round1(tpsSecs / r.Seconds)
	}
	r.Latency, r.lat = summarize(lat), lat
	r.CPU, r.DB = mergeCPU(cpus), mergeDB(dbs)
	return r
}

func mergeLoads(parts []LoadRun) LoadRun {
	if len(parts) == 0 {
		return LoadRun{}
	}
	r := LoadRun{Name: parts[0].Name, Concurrency: parts[0].Concurrency, Rate: parts[0].Rate, Statuses: map[string]int{}, Rounds: len(parts)}
	var cpus []weighted[CPU]
	var dbs []weighted[DB]
	var drainedSecs float64
	for _, p := range parts {
		r.add(p)
		r.Seconds += p.Seconds
		r.Drained += p.Drained
		drainedSecs += p.DrainedPerSec * p.Seconds
		cpus = append(cpus, weighted[CPU]{p.CPU, p.Seconds})
		dbs = append(dbs, weighted[DB]{p.DB, p.Seconds})
	}
	r.Seconds = round2(r.Seconds)
	r.finish()
	if r.Seconds > 0 {
		r.DrainedPerSec = round1(drainedSecs / r.Seconds)
	}
	r.CPU, r.DB = mergeCPU(cpus), mergeDB(dbs)
	return r
}

type weighted[T any] struct {
	v T
	w float64
}

func mergeCPU(parts []weighted[CPU]) CPU {
	var c CPU
	var total float64
	for _, p := range parts {
		total += p.w
	}
	if total == 0 {
		return c
	}
	fields := func(c *CPU) []*float64 {
		return []*float64{&c.Client, &c.API, &c.Worker, &c.Carrier, &c.Pgbench, &c.Postgres, &c.Machine, &c.Steal}
	}
	sum := fields(&c)
	for _, p := range parts {
		for i, v := range fields(&p.v) {
			*sum[i] += *v * p.w / total
		}
	}
	for _, v := range sum {
		*v = round2(*v)
	}
	return c
}

func mergeDB(parts []weighted[DB]) DB {
	var d DB
	var secs float64
	waits := map[string]float64{}
	for _, p := range parts {
		d.Commits += p.v.Commits
		d.Rollbacks += p.v.Rollbacks
		d.WALBytes += p.v.WALBytes
		d.WALSyncs += p.v.WALSyncs
		d.Samples += p.v.Samples
		secs += p.w
		for _, s := range p.v.Waits {
			waits[s.Name] += s.Share * float64(p.v.Samples)
		}
	}
	d.rates(secs)
	d.Waits = topShares(waits, float64(d.Samples), 8)
	return d
}

// rates fills in the commits a second over secs and the commits per WAL flush.
func (d *DB) rates(secs float64) {
	if secs > 0 {
		d.CommitsPerSec = round1(float64(d.Commits) / secs)
	}
	if d.WALSyncs > 0 {
		d.CommitsPerSync = round2(float64(d.Commits) / float64(d.WALSyncs))
	}
}

// topShares turns counts into the n largest shares of total (0: of their
// sum), the largest first.
func topShares(counts map[string]float64, total float64, n int) []Share {
	if total <= 0 {
		for _, v := range counts {
			total += v
		}
	}
	var s []Share
	for k, v := range counts {
		s = append(s, Share{Name: k, Share: round3(v / total)})
	}
	slices.SortFunc(s, func(a, b Share) int {
		return cmp.Or(cmp.Compare(b.Share, a.Share), strings.Compare(a.Name, b.Name))
	})
	return s[:min(n, len(s))]
}
