package capacity

import (
	"time"
)

// Report is everything one run measured.
type Report struct {
	Command        string     `json:"command"`
	StartedAt      time.Time  `json:"started_at"`
	Seconds        float64    `json:"seconds"`
	Database       string     `json:"database"`
	Machine        Machine    `json:"machine"`
	Records        int        `json:"records"`
	Live           int        `json:"live"`
	Fill           Fill       `json:"fill"`
	Sizes          []Size     `json:"sizes"`
	Churned        Size       `json:"churned_sample"`
	Tombstones     Size       `json:"tombstones"`
	Purges         []Purge    `json:"purges"`
	TombstonePurge Purge      `json:"tombstone_purge"`
	RiverCleaner   Purge      `json:"river_cleaner"`
	Loads          []Load     `json:"api_loads"`
	Pipeline       Pipeline   `json:"pipeline"`
	Partitions     Partitions `json:"partitions"`
	ScaleOut       ScaleOut   `json:"scale_out"`
}

// Machine describes where the figures come from.
type Machine struct {
	CPUs       int               `json:"cpus"`
	CPUModel   string            `json:"cpu_model"`
	MemoryGiB  float64           `json:"memory_gib"`
	GoVersion  string            `json:"go_version"`
	PostgreSQL string            `json:"postgresql"`
	Settings   map[string]string `json:"settings"`
}

// Fill is how the records were written.
type Fill struct {
	Rows       int     `json:"rows"`
	Seconds    float64 `json:"seconds"`
	RowsPerSec float64 `json:"rows_per_sec"`
	Method     string  `json:"method"`
}

// Size is one table's footprint.
type Size struct {
	Table         string      `json:"table"`
	Rows          int64       `json:"rows"`
	HeapBytes     int64       `json:"heap_bytes"`
	IndexBytes    int64       `json:"index_bytes"`
	ToastBytes    int64       `json:"toast_bytes"`
	TotalBytes    int64       `json:"total_bytes"`
	BytesPerRow   float64     `json:"bytes_per_row"`
	HeapPerRow    float64     `json:"heap_per_row"`
	IndexPerRow   float64     `json:"index_per_row"`
	ToastPerRow   float64     `json:"toast_per_row"`
	TupleBytesAvg float64     `json:"tuple_bytes_avg"` // avg(pg_column_size(row)): the data itself
	Indexes       []IndexSize `json:"indexes,omitempty"`
	Note          string      `json:"note,omitempty"`
}

// IndexSize is one index's footprint.
type IndexSize struct {
	Name   string  `json:"name"`
	Bytes  int64   `json:"bytes"`
	PerRow float64 `json:"per_row"`
}

// Purge is one purge run.
type Purge struct {
	Name             string  `json:"name"`
	Batch            int     `json:"batch"`
	Deleted          int64   `json:"deleted"`
	Seconds          float64 `json:"seconds"`
	KeysPerSec       float64 `json:"keys_per_sec"`
	Batches          int     `json:"batches"`
	BatchP50Ms       float64 `json:"batch_p50_ms"`
	BatchP99Ms       float64 `json:"batch_p99_ms"`
	BatchMaxMs       float64 `json:"batch_max_ms"`
	FirstTenthPerSec float64 `json:"first_tenth_keys_per_sec"`
	LastTenthPerSec  float64 `json:"last_tenth_keys_per_sec"`
	// WALBytes is the LSN distance over the whole purge: every database's WAL.
	WALBytes     int64   `json:"wal_bytes_cluster"`
	WALRawPerKey float64 `json:"wal_cluster_per_key"`
	// WALPerKey is this database's WAL per key over WALSampleKeys keys in
	// three windows (start, middle, end of the purge), read back with
	// pg_walinspect (0 when it could not be); WALNoFPIPerKey leaves out the
	// full-page images, which depend on how recently a checkpoint ran.
	WALPerKey         float64 `json:"wal_per_key"`
	WALNoFPIPerKey    float64 `json:"wal_no_fpi_per_key"`
	WALSampleKeys     int64   `json:"wal_sample_keys"`
	WALSampleFPIShare float64 `json:"wal_sample_fpi_share"`
	UnderLoad         bool    `json:"under_load"`
	RemainingExpired  int64   `json:"remaining_expired"`
	Host              Host    `json:"host"`
}

// Load is one load run against the API or the key table.
type Load struct {
	Name       string             `json:"name"`
	Target     string             `json:"target"`
	Clients    int                `json:"clients"`
	TargetRate float64            `json:"target_rate"` // 0: closed loop, as fast as it goes
	Seconds    float64            `json:"seconds"`
	Requests   int                `json:"requests"`
	PerSec     float64            `json:"per_sec"`
	Errors     int                `json:"errors"`
	Statuses   map[string]int     `json:"statuses"`
	P50Ms      float64            `json:"p50_ms"`
	P90Ms      float64            `json:"p90_ms"`
	P99Ms      float64            `json:"p99_ms"`
	MaxMs      float64            `json:"max_ms"`
	Kinds      map[string]Latency `json:"kinds"`
	During     string             `json:"during,omitempty"`
	Host       Host               `json:"host"`
}

// Latency summarises one kind of request.
type Latency struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// WAL is the write-ahead log one phase wrote.
type WAL struct {
	// RawBytes is the LSN distance: the whole cluster's WAL, other databases' included.
	RawBytes int64 `json:"raw_bytes"`
	// Filtered is true when the WAL was read back (pg_walinspect) and only
	// this database's records (and its transactions' commits) were counted.
	Filtered bool  `json:"filtered"`
	Bytes    int64 `json:"bytes"`
	FPIBytes int64 `json:"fpi_bytes"`
	Records  int64 `json:"records"`
	Commits  int64 `json:"commits"`
}

// Pipeline is WAL and throughput of whole requests.
type Pipeline struct {
	Requests          int     `json:"requests"`
	AcceptSeconds     float64 `json:"accept_seconds"`
	AcceptsPerSec     float64 `json:"accepts_per_sec"`
	AcceptWAL         WAL     `json:"accept_wal"`
	WALPerAccept      float64 `json:"wal_per_accept"`
	WALPerAcceptNoFPI float64 `json:"wal_per_accept_no_fpi"`
	CommitsPerAccept  float64 `json:"commits_per_accept"`
	AcceptHost        Host    `json:"accept_host"`
	WorkSeconds       float64 `json:"work_seconds"`
	LabelsPerSec      float64 `json:"labels_per_sec"`
	WorkWAL           WAL     `json:"work_wal"`
	WALPerLabel       float64 `json:"wal_per_label"`
	WALPerLabelNoFPI  float64 `json:"wal_per_label_no_fpi"`
	CommitsPerLabel   float64 `json:"commits_per_label"`
	WorkHost          Host    `json:"work_host"`
	Succeeded         int     `json:"succeeded"`
	RiverJobs         int     `json:"river_jobs_completed"`
}

// Partitions is the evaluation of daily partitions on expires_at.
type Partitions struct {
	Granularity string          `json:"granularity"`
	Parts       []PartitionInfo `json:"partitions"`
	FillSeconds float64         `json:"fill_seconds"`
	Size        Size            `json:"size"`
	PlainSize   Size            `json:"plain_size"`
	// PKError is what PostgreSQL answers to PRIMARY KEY (caller_id, idem_key).
	PKError string `json:"pk_error"`
	Drop    struct {
		Partition        string  `json:"partition"`
		Deleted          int64   `json:"deleted"`
		StartedRows      int64   `json:"started_rows"`
		TombstoneSeconds float64 `json:"tombstone_seconds"`
		DetachSeconds    float64 `json:"detach_seconds"`
		DropSeconds      float64 `json:"drop_seconds"`
		TotalSeconds     float64 `json:"total_seconds"`
		KeysPerSec       float64 `json:"keys_per_sec"`
		KeysPerSecNoTomb float64 `json:"keys_per_sec_without_tombstones"`
		WALBytes         int64   `json:"wal_bytes"`
	} `json:"drop"`
	PlainSweep Purge `json:"plain_sweep_under_load"`
	// Correctness.
	DuplicateRowsPartitioned int      `json:"duplicate_rows_partitioned"`
	DuplicateRowsPlain       int      `json:"duplicate_rows_plain"`
	RowMoved                 bool     `json:"row_moved"`
	MovedFrom                string   `json:"moved_from"`
	MovedTo                  string   `json:"moved_to"`
	ConcurrentLockPartition  string   `json:"concurrent_lock_partitioned"`
	ConcurrentLockPlain      string   `json:"concurrent_lock_plain"`
	Loads                    []Load   `json:"loads"`
	Adopted                  bool     `json:"adopted"`
	Reasons                  []string `json:"reasons"`
}

// PartitionInfo is one partition.
type PartitionInfo struct {
	Name string `json:"name"`
	From string `json:"from"`
	To   string `json:"to"`
	Rows int64  `json:"rows"`
}

// ScaleOut is the seed's arithmetic at ten times its peak, with measured costs.
type ScaleOut struct {
	PeakCreatesPerSec   float64 `json:"peak_creates_per_sec"`
	KeysPerDay          float64 `json:"keys_per_day"`
	SeedBytesPerKey     float64 `json:"seed_bytes_per_key"`
	SeedKeyStoreBytes   float64 `json:"seed_key_store_bytes"`
	BytesPerKey         float64 `json:"bytes_per_key"`
	BytesPerKeyChurned  float64 `json:"bytes_per_key_churned"`
	KeyStoreBytes       float64 `json:"key_store_bytes"`
	KeyStoreBytesHigh   float64 `json:"key_store_bytes_churned"`
	TombstoneBytes      float64 `json:"tombstone_bytes_30d"`
	RiverJobBytes       float64 `json:"river_job_bytes"`
	IntentLabelPerDay   float64 `json:"intents_labels_bytes_per_day"`
	WALPerLabel         float64 `json:"wal_per_label"`
	WALPerLabelNoFPI    float64 `json:"wal_per_label_no_fpi"`
	WALBytesPerSec      float64 `json:"wal_bytes_per_sec"`
	WALBytesPerSecNoFPI float64 `json:"wal_bytes_per_sec_no_fpi"`
	WALBytesPerDay      float64 `json:"wal_bytes_per_day"`
	CommitsPerLabel     float64 `json:"commits_per_label"`
	CommitsPerSec       float64 `json:"commits_per_sec"`
	PurgeKeysPerSec     float64 `json:"purge_keys_per_sec_needed"`
	MeasuredAccepts     float64 `json:"measured_accepts_per_sec"`
	CommitsNoNotify     float64 `json:"measured_commits_per_sec_no_notify"`
	CommitsNotify       float64 `json:"measured_commits_per_sec_notify"`
	MeasuredLabels      float64 `json:"measured_labels_per_sec"`
	MeasuredPurge       float64 `json:"measured_purge_keys_per_sec"`
	ShardsByAccepts     float64 `json:"shards_by_accepts_here"`
	ShardsByLabels      float64 `json:"shards_by_labels_here"`
}
