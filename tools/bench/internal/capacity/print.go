package capacity

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

func mb(b float64) string {
	switch {
	case b >= 1<<40:
		return fmt.Sprintf("%.2f TiB", b/(1<<40))
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// PrintReport writes the report for people.
func PrintReport(w io.Writer, r *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	p := func(format string, a ...any) { fmt.Fprintf(tw, format+"\n", a...) }
	m := r.Machine
	p("Capacity of the key store: %s", r.Command)
	p("machine: %d CPUs (%s), %.1f GiB, %s; PostgreSQL %s", m.CPUs, m.CPUModel, m.MemoryGiB, m.GoVersion, m.PostgreSQL)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m.Settings {
			if !yield(k) {
				return
			}
		}
	})
	var set []string
	for _, k := range keys {
		set = append(set, k+"="+m.Settings[k])
	}
	p("settings: %s", strings.Join(set, ", "))
	p("run: %.0f s in %s; %d expired + %d live records; fill %.0f rows/s (%s)", r.Seconds, r.Database, r.Records, r.Live, r.Fill.RowsPerSec, r.Fill.Method)
	p("")
	p("1. Bytes per row (after VACUUM ANALYZE)")
	p("table\trows\ttotal\tper row\theap/row\tindexes/row\ttoast/row\tdata/row")
	for _, s := range append(slices.Clone(r.Sizes), r.Churned, r.Tombstones) {
		p("%s\t%d\t%s\t%.0f B\t%.0f B\t%.0f B\t%.1f B\t%.0f B", s.Table, s.Rows, mb(float64(s.TotalBytes)), s.BytesPerRow, s.HeapPerRow, s.IndexPerRow, s.ToastPerRow, s.TupleBytesAvg)
	}
	for _, s := range r.Sizes {
		if s.Table != "idempotency_keys" {
			continue
		}
		for _, ix := range s.Indexes {
			p("  index %s\t\t%s\t%.0f B", ix.Name, mb(float64(ix.Bytes)), ix.PerRow)
		}
	}
	p("seed: 512 B per record")
	p("")
	p("2. Purge")
	p("run\tdeleted\tseconds\tkeys/s\tbatch p50\tbatch p99\tbatch max\tfirst 10%%\tlast 10%%\tWAL/key\twithout FPI\tWAL/key (cluster)")
	purges := append(slices.Clone(r.Purges), r.TombstonePurge, r.RiverCleaner)
	for _, x := range purges {
		p("%s\t%d\t%.1f\t%.0f\t%.1f ms\t%.1f ms\t%.1f ms\t%.0f/s\t%.0f/s\t%.0f B\t%.0f B\t%.0f B",
			x.Name, x.Deleted, x.Seconds, x.KeysPerSec, x.BatchP50Ms, x.BatchP99Ms, x.BatchMaxMs, x.FirstTenthPerSec, x.LastTenthPerSec,
			x.WALPerKey, x.WALNoFPIPerKey, x.WALRawPerKey)
	}
	p("WAL/key: this database's records in three windows of the purge (start, middle, end), read back; cluster: LSN distance over the whole purge, every database")
	for _, x := range purges {
		p("  %s: %s; waits: %s", x.Name, x.Host, x.Host.topWaits(4))
	}
	p("")
	p("3. API latency (%d clients)", r.Loads[0].Clients)
	printLoads(p, r.Loads)
	p("")
	pl := r.Pipeline
	p("4. Whole requests (API -> relay -> River worker -> completion), %d requests", pl.Requests)
	p("accept: %.0f/s (%d clients, closed loop); WAL %.0f B/request, %.0f B without full-page images; %.2f commits/request; filtered to this database: %v",
		pl.AcceptsPerSec, r.Loads[0].Clients, pl.WALPerAccept, pl.WALPerAcceptNoFPI, pl.CommitsPerAccept, pl.AcceptWAL.Filtered)
	p("  %s; waits: %s", pl.AcceptHost, pl.AcceptHost.topWaits(4))
	p("work (dispatch, lease, carrier, complete): %.0f labels/s; WAL %.0f B/label, %.0f B without full-page images; %.2f commits/label; %d succeeded, %d River jobs completed",
		pl.LabelsPerSec, pl.WALPerLabel, pl.WALPerLabelNoFPI, pl.CommitsPerLabel, pl.Succeeded, pl.RiverJobs)
	p("  %s; waits: %s", pl.WorkHost, pl.WorkHost.topWaits(4))
	p("")
	pt := r.Partitions
	p("5. Daily partitions on expires_at")
	p("fill %.1f s; %s; %.0f B/record (plain %.0f B)", pt.FillSeconds, pt.Size.Note, pt.Size.BytesPerRow, pt.PlainSize.BytesPerRow)
	for _, x := range pt.Parts {
		p("  %s\t[%s, %s)\t%d rows", x.Name, x.From, x.To, x.Rows)
	}
	p("PRIMARY KEY (caller_id, idem_key): %s", pt.PKError)
	p("drop %s: %d keys (%d started); tombstones %.2f s, DETACH CONCURRENTLY %.2f s, DROP %.3f s: %.0f keys/s (%.0f without tombstones)",
		pt.Drop.Partition, pt.Drop.Deleted, pt.Drop.StartedRows, pt.Drop.TombstoneSeconds, pt.Drop.DetachSeconds, pt.Drop.DropSeconds, pt.Drop.KeysPerSec, pt.Drop.KeysPerSecNoTomb)
	p("plain jobs.Sweep under the same load: %d keys in %.1f s: %.0f keys/s", pt.PlainSweep.Deleted, pt.PlainSweep.Seconds, pt.PlainSweep.KeysPerSec)
	printLoads(p, pt.Loads)
	p("same key claimed twice: plain %d row(s), partitioned %d row(s)", pt.DuplicateRowsPlain, pt.DuplicateRowsPartitioned)
	p("completion across a day boundary: moved %v (%s -> %s); waiting Lease: partitioned %q, plain %q", pt.RowMoved, pt.MovedFrom, pt.MovedTo, pt.ConcurrentLockPartition, pt.ConcurrentLockPlain)
	p("adopted: %v", pt.Adopted)
	for _, x := range pt.Reasons {
		p("  - %s", x)
	}
	p("")
	s := r.ScaleOut
	p("6. At 10x the seed's peak: %.0f creates/s, %.4g keys/day", s.PeakCreatesPerSec, s.KeysPerDay)
	p("key store (24 h): seed %s at 512 B; measured %s at %.0f B (churned %s at %.0f B)", mb(s.SeedKeyStoreBytes), mb(s.KeyStoreBytes), s.BytesPerKey, mb(s.KeyStoreBytesHigh), s.BytesPerKeyChurned)
	p("tombstones (30 d): %s; River jobs (24 h): %s; intents + labels: %s per day, kept", mb(s.TombstoneBytes), mb(s.RiverJobBytes), mb(s.IntentLabelPerDay))
	p("WAL per label (accept + work + purge + tombstone purge + job cleanup): %.0f B as measured = %s/s, %s/day; without full-page images %.0f B = %s/s",
		s.WALPerLabel, mb(s.WALBytesPerSec), mb(s.WALBytesPerDay), s.WALPerLabelNoFPI, mb(s.WALBytesPerSecNoFPI))
	p("commits: %.2f per label = %.0f/s; purge needed: %.0f keys/s (keys) + as many tombstones and River jobs", s.CommitsPerLabel, s.CommitsPerSec, s.PurgeKeysPerSec)
	p("measured here: %.0f accepts/s through the API, %.0f accept transactions/s with pg_notify, %.0f without; %.0f labels/s; %.0f purged keys/s",
		s.MeasuredAccepts, s.CommitsNotify, s.CommitsNoNotify, s.MeasuredLabels, s.MeasuredPurge)
	p("  -> 10x peak is %.1f x this machine by accepts, %.1f x by labels", s.ShardsByAccepts, s.ShardsByLabels)
}

func printLoads(p func(string, ...any), loads []Load) {
	p("load\ttarget\trate\trequests\tper s\terrors\tp50\tp90\tp99\tmax\tkinds")
	for _, l := range loads {
		rate := "closed loop"
		if l.TargetRate > 0 {
			rate = fmt.Sprintf("%.0f/s", l.TargetRate)
		}
		var kinds []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range l.Statuses {
				if !yield(k) {
					return
				}
			}
		}) {
			kinds = append(kinds, fmt.Sprintf("%s:%d", k, l.Statuses[k]))
		}
		p("%s\t%s\t%s\t%d\t%.0f\t%d\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t%s", l.Name, l.Target, rate, l.Requests, l.PerSec, l.Errors, l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs, strings.Join(kinds, " "))
	}
	for _, l := range loads {
		p("  %s: %s; waits: %s", l.Name, l.Host, l.Host.topWaits(4))
	}
}
