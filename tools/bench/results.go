package main

import (
	"time"
)

// Results is everything one run measured; it is written as DIR/<date>.json.
type Results struct {
	Date      string    `json:"date"`
	StartedAt time.Time `json:"started_at"`
	Seconds   float64   `json:"seconds"`
	Command   string    `json:"command"`
	Mode      string    `json:"mode"`
	Machine   Machine   `json:"machine"`
	Setup     Setup     `json:"setup"`

	Ceiling []PgbenchRun `json:"ceiling"`
	Accept  []LoadRun    `json:"accept"`
	// AcceptLive is the accept with the pipeline live: a worker and the
	// simulator running and draining while the API accepts, as in production.
	AcceptLive []LoadRun   `json:"accept_live"`
	EndToEnd   []E2ERun    `json:"end_to_end"`
	Paced      []PacedRun  `json:"paced"`
	Replays    []ReplayRun `json:"replays"`
	Store      *Store      `json:"store,omitempty"`

	// Bar is the bar (report.go), checked against this run's own figures.
	Bar []Check `json:"bar"`
	// Errors names every phase that failed; the others still ran.
	Errors []string `json:"errors,omitempty"`
}

// Machine describes where the figures come from.
type Machine struct {
	CPUs       int               `json:"cpus"`
	CPUModel   string            `json:"cpu_model"`
	MemoryGiB  float64           `json:"memory_gib"`
	Kernel     string            `json:"kernel"`
	GoVersion  string            `json:"go_version"`
	PostgreSQL string            `json:"postgresql"`
	Pgbench    string            `json:"pgbench"`
	Server     string            `json:"server"` // private or the given URL (redacted)
	Settings   map[string]string `json:"settings"`
	// LoadAverage is /proc/loadavg (1, 5, 15 min) at the start and at the end:
	// other work on the machine competes for the same cores.
	LoadAverageStart [3]float64 `json:"load_average_start"`
	LoadAverageEnd   [3]float64 `json:"load_average_end"`
}

// Setup is what the loads were.
type Setup struct {
	Loads
	DurationSeconds float64 `json:"duration_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	PacedSeconds    float64 `json:"paced_seconds"`
	CeilingScript   string  `json:"ceiling_script"`
	// SelectScript is the primary-key read pgbench runs right after the
	// replays that follow each burst (its range filled in with the burst's orders).
	SelectScript string `json:"select_script"`
	// GOGC is the api's and worker's GOGC (see serviceGOGC).
	GOGC int `json:"gogc"`
}

// Latency summarises a set of latencies, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// CPU is how many cores each party used on average during a load.
type CPU struct {
	Client   float64 `json:"client_cores"`             // this process: the load generator (and the harness)
	API      float64 `json:"api_cores,omitempty"`      // the api process
	Worker   float64 `json:"worker_cores,omitempty"`   // the worker process
	Carrier  float64 `json:"carrier_cores,omitempty"`  // the simulator
	Pgbench  float64 `json:"pgbench_cores,omitempty"`  // the pgbench process
	Postgres float64 `json:"postgres_cores,omitempty"` // every process of the private server (0 with --server)
	Machine  float64 `json:"machine_cores"`            // everything on the machine (/proc/stat), other work included
	// Steal is the cores the host stole (/proc/stat's steal), not in Machine.
	Steal float64 `json:"steal_cores"`
}

// CPUPerLabel is CPU microseconds per label, by party.
type CPUPerLabel struct {
	Client   float64 `json:"client"`
	API      float64 `json:"api"`
	Worker   float64 `json:"worker"`
	Carrier  float64 `json:"carrier"`
	Postgres float64 `json:"postgres,omitempty"` // 0 with --server
	// Ours is the sum of the run's own processes above.
	Ours    float64 `json:"ours"`
	Machine float64 `json:"machine"` // everything on the machine, other work included
}

// DB is what the database reports about a load (pg_stat_database and
// pg_stat_wal deltas) and where its backends spent their time.
type DB struct {
	Commits        int64   `json:"commits"`
	Rollbacks      int64   `json:"rollbacks"`
	CommitsPerSec  float64 `json:"commits_per_sec"`
	WALBytes       int64   `json:"wal_bytes"`
	WALSyncs       int64   `json:"wal_syncs"` // WAL flushes (pg_stat_wal.wal_sync): with group commit, fewer than commits
	CommitsPerSync float64 `json:"commits_per_sync"`
	// Waits is the share of sampled busy backends in each state (waitName).
	Waits   []Share `json:"waits"`
	Samples int     `json:"wait_samples"`
}

// Share is one part of a whole.
type Share struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// PgbenchRun is one run of the ceiling script.
type PgbenchRun struct {
	Concurrency  int     `json:"concurrency"`
	Threads      int     `json:"threads"`
	Seconds      float64 `json:"seconds"`
	Transactions int64   `json:"transactions"`
	Failed       int64   `json:"failed"`
	TPS          float64 `json:"tps"`
	Latency      Latency `json:"latency"`
	CPU          CPU     `json:"cpu"`
	DB           DB      `json:"db"`
	Rounds       int     `json:"rounds"`
	Error        string  `json:"error,omitempty"`

	lat []int64 // nanoseconds, for merging rounds
}

// LoadRun is one closed-loop HTTP load.
type LoadRun struct {
	Name        string         `json:"name"`
	Concurrency int            `json:"concurrency"`
	Rate        float64        `json:"target_rate,omitempty"` // 0: closed loop, back to back
	Seconds     float64        `json:"seconds"`
	Requests    int            `json:"requests"`
	PerSec      float64        `json:"per_sec"`
	New         int            `json:"new"`
	Repeats     int            `json:"repeats"`
	Errors      int            `json:"errors"`
	FirstError  string         `json:"first_error,omitempty"`
	Statuses    map[string]int `json:"statuses"`
	Latency     Latency        `json:"latency"`
	// StartLateness, for a paced load, is how late the clients took up
	// their scheduled starts (Latency, measured from them, includes it).
	StartLateness *Latency `json:"start_lateness,omitempty"`
	CPU           CPU      `json:"cpu"`
	DB            DB       `json:"db"`
	// RatioToCeiling is PerSec over the pgbench TPS at the same concurrency,
	// and P99ToCeiling the load's p99 over pgbench's p99 there.
	RatioToCeiling float64 `json:"ratio_to_ceiling,omitempty"`
	P99ToCeiling   float64 `json:"p99_to_ceiling_p99,omitempty"`
	// Drained, with the pipeline live, is the intents made final during the
	// load and its warm-up, DrainedPerSec that a second.
	Drained       int64   `json:"drained,omitempty"`
	DrainedPerSec float64 `json:"drained_per_sec,omitempty"`
	Rounds        int     `json:"rounds,omitempty"`

	lat []int64 // nanoseconds, for merging rounds
}

// Through is a load sent through the whole pipeline (api, worker,
// simulator), metered from its first create until every create is final.
type Through struct {
	// Submit is the sending of the creates (202s).
	Submit LoadRun `json:"submit"`
	// Succeeded and Failed count the intents final at the end; Pending the
	// ones that were not final by the deadline.
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Pending   int64 `json:"pending"`
	// Seconds is from the first intent's created_at to the last completed_at.
	Seconds       float64 `json:"seconds"`
	CreatesPerSec float64 `json:"creates_per_sec"`
	// ToFinal is completed_at - created_at of every intent.
	ToFinal Latency `json:"to_final"`
	CPU     CPU     `json:"cpu"`
	// CPUPerLabel is the CPU µs per label from the first create to the last final.
	CPUPerLabel CPUPerLabel `json:"cpu_us_per_label"`
	// DB is the database's counters over the same time, and the commits
	// and WAL flushes per label made final.
	DB                 DB      `json:"db"`
	CommitsPerLabel    float64 `json:"commits_per_label"`
	WALFlushesPerLabel float64 `json:"wal_flushes_per_label"`

	before, after cpuReading
}

// E2ERun is one end-to-end run: creates sent back to back, then waited for
// until final.
type E2ERun struct {
	SimLatencyMs float64 `json:"sim_latency_ms"`
	Creates      int     `json:"creates"`
	Concurrency  int     `json:"concurrency"`
	Through
	// Ceiling is pgbench at the run's concurrency, run right before it, and
	// CeilingAfter the same right after the pipeline drained.
	Ceiling      *PgbenchRun `json:"ceiling,omitempty"`
	CeilingAfter *PgbenchRun `json:"ceiling_after,omitempty"`
	// CeilingTPS is the mean of the two ceilings' TPS, which RatioToCeiling
	// holds CreatesPerSec to (none without pgbench).
	CeilingTPS         float64 `json:"ceiling_tps,omitempty"`
	RatioToCeiling     float64 `json:"ratio_to_ceiling,omitempty"`
	CeilingConcurrency int     `json:"ceiling_concurrency,omitempty"`
	// ReplaysAfter is the replays right after the burst became final,
	// SelectAfter pgbench's primary-key read right after them; the ratios
	// are the replays' p99 over their p50 and over the SELECT's p99.
	ReplaysAfter           *LoadRun    `json:"replays_after_burst,omitempty"`
	SelectAfter            *PgbenchRun `json:"pk_select_after_burst,omitempty"`
	ReplayP99OverP50       float64     `json:"replay_p99_over_p50,omitempty"`
	ReplayP99OverSelectP99 float64     `json:"replay_p99_over_select_p99,omitempty"`
	Error                  string      `json:"error,omitempty"`
}

// PacedRun is a paced phase: creates sent open loop at Rate a second for
// the phase's seconds through the whole pipeline, and pgbench running the
// ceiling's transaction paced at the same rate by as many clients for as long
// (-R, latency from the scheduled start, as the creates').
type PacedRun struct {
	Rate         float64 `json:"rate"`
	SimLatencyMs float64 `json:"sim_latency_ms"`
	Clients      int     `json:"clients"`
	// Scheduled is the creates the schedule held (rate × seconds);
	// Submit.PerSec is the rate the creates were answered at, and
	// ShareOfPeak that rate over peakRate. A generator that fell behind
	// says so in Submit.StartLateness.
	Scheduled   int     `json:"scheduled"`
	ShareOfPeak float64 `json:"share_of_peak"`
	Through
	Pgbench *PgbenchRun `json:"pgbench,omitempty"`
	// PgbenchCPUPerTx is the machine's CPU µs per pgbench transaction.
	PgbenchCPUPerTx float64 `json:"pgbench_machine_us_per_tx,omitempty"`
	Error           string  `json:"error,omitempty"`
}

// ReplayRun is replays with a store of a given size.
type ReplayRun struct {
	Keys        int     `json:"keys"`
	FillSeconds float64 `json:"fill_seconds"`
	FillPerSec  float64 `json:"fill_rows_per_sec"`
	// Load is back to back (closed loop): the replay throughput.
	Load LoadRun `json:"load"`
	// Paced is at --replay-rate, latency from the scheduled start: what a
	// replay costs a caller when the service is not saturated.
	Paced LoadRun `json:"paced"`
	Error string  `json:"error,omitempty"`
}

// Store is the key store's size and purge rate.
type Store struct {
	Rows           int64   `json:"rows"`
	BytesPerRecord float64 `json:"bytes_per_record"`
	HeapPerRecord  float64 `json:"heap_per_record"`
	IndexPerRecord float64 `json:"index_per_record"`
	ToastPerRecord float64 `json:"toast_per_record"`
	// IntentBytesPerRow is label_intents' footprint per row, for comparison:
	// it lives as long as the key (and longer).
	IntentBytesPerRow float64 `json:"intent_bytes_per_row"`
	Purge             Purge   `json:"purge"`
}

// Purge is the sweeper's statement run in a loop over the filled keys.
type Purge struct {
	Batch      int     `json:"batch"`
	Deleted    int64   `json:"deleted"`
	Seconds    float64 `json:"seconds"`
	KeysPerSec float64 `json:"keys_per_sec"`
	BatchP50Ms float64 `json:"batch_p50_ms"`
	BatchP99Ms float64 `json:"batch_p99_ms"`
	Complete   bool    `json:"complete"` // every filled key was purged before --purge-max
	Error      string  `json:"error,omitempty"`
}

// Check is one line of the bar: a ratio that must not exceed Bar.
type Check struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Bar      float64 `json:"bar"`
	Pass     bool    `json:"pass"`
	Note     string  `json:"note,omitempty"`
}
