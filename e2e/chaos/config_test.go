package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/labelkit/labels/internal/devdb"
)

// Config is one chaos run. The zero value of a field means its default.
type Config struct {
	// Intents is the number of distinct intents, split between the two
	// callers (default 300).
	Intents int
	// Duration is the disturbed window (default 90s): the intents' first
	// requests are spread over its first three quarters, and the worker kills,
	// the API kill and the PostgreSQL restart all happen inside it. The drain
	// and the checks come after it.
	Duration time.Duration
	// Workers is the number of worker processes (default 3).
	Workers int
	// APIs is the number of API processes (default 1); the callers send
	// their requests to each in turn.
	APIs int
	// KillEvery is the pause between two worker SIGKILLs (default 5s); a
	// negative value kills no worker.
	KillEvery time.Duration
	// Seed makes the intents, their repeats, the victims and the simulator's
	// misbehaviour reproducible (default 1).
	Seed int64
	// DrainTimeout bounds the wait for every accepted intent to become final
	// after the window (default 5m). An intent still pending then is a violation.
	DrainTimeout time.Duration
	// BinDir holds prebuilt api, worker and carrier binaries; empty builds
	// ./cmd/api, ./cmd/worker and ./cmd/carrier into a temporary directory.
	BinDir string
	// LogDir, when set, receives every process's output, one file per process
	// slot (worker-2.log holds every incarnation of worker 2).
	LogDir string
	// Progress receives a line per phase and per disturbance; nil discards.
	Progress io.Writer
	// PoolerSize, when positive, puts PgBouncer (transaction mode, that many
	// server connections, server_reset_query empty) between every binary and
	// PostgreSQL: the API and the odd-numbered workers get
	// DATABASE_DIRECT_URL for LISTEN, the others poll (River's poll-only
	// mode). Needs the pgbouncer binary.
	PoolerSize int
	// HA, when set, runs the fleet on a failover formation (a primary and
	// its standby under a monitor) instead of a private server, and disturbs
	// the formation instead of the fleet: see [HA].
	HA *HA
}

// Defaults of [Config].
const (
	DefaultIntents      = 300
	DefaultDuration     = 90 * time.Second
	DefaultWorkers      = 3
	DefaultKillEvery    = 5 * time.Second
	DefaultSeed         = 1
	DefaultDrainTimeout = 5 * time.Minute
)

// The fleet's settings. The simulator misbehaves on every kind of call the
// protocol knows, and takes 0.1 to 0.5 s per purchase as real carriers do, so
// that a killed worker is often in the middle of one; the workers retry fast
// and often enough that nothing fails for good under the injected faults, so
// every intent must succeed.
var (
	simEnv = map[string]string{
		"SIM_LATENCY":         "100ms",
		"SIM_LATENCY_JITTER":  "400ms",
		"SIM_FAIL_RATE":       "0.1",
		"SIM_DROP_REPLY_RATE": "0.1",
		"SIM_TIMEOUT_RATE":    "0.05",
		"SIM_TIMEOUT_DELAY":   "3s", // above CARRIER_TIMEOUT: the purchase lands after the worker gave up
	}
	workerEnv = map[string]string{
		"CARRIER_TIMEOUT":      "2s",
		"LEASE_DURATION":       "4s",
		"RETRY_BASE":           "100ms",
		"RETRY_MAX":            "1s",
		"MAX_ATTEMPTS":         "50",
		"WEBHOOK_TIMEOUT":      "1s",
		"WEBHOOK_RETRY_BASE":   "100ms",
		"WEBHOOK_RETRY_MAX":    "2s",
		"WEBHOOK_MAX_ATTEMPTS": "50",
	}
)

// leaseDuration is LEASE_DURATION above: River rescues a killed worker's jobs
// lease + 15 s after they started, on a rescuer pass every 30 s.
const leaseDuration = 4 * time.Second

// withDefaults fills in the zero values.
func (c Config) withDefaults() Config {
	c.Intents = cmp.Or(c.Intents, DefaultIntents)
	c.Duration = cmp.Or(c.Duration, DefaultDuration)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.APIs = cmp.Or(c.APIs, 1)
	c.KillEvery = cmp.Or(c.KillEvery, DefaultKillEvery)
	c.Seed = cmp.Or(c.Seed, DefaultSeed)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// Validate reports the first value out of range.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Intents < 2 || c.Intents > 10000:
		return fmt.Errorf("intents %d: want 2 to 10000", c.Intents)
	case c.Duration < 5*time.Second || c.Duration > time.Hour:
		return fmt.Errorf("duration %s: want 5s to 1h", c.Duration)
	case c.Workers < 1 || c.Workers > 20:
		return fmt.Errorf("workers %d: want 1 to 20", c.Workers)
	case c.APIs < 1 || c.APIs > 8:
		return fmt.Errorf("apis %d: want 1 to 8", c.APIs)
	case c.HA != nil && (c.HA.Formation == nil || len(c.HA.Steps) == 0):
		return errors.New("ha: want a formation and at least one step")
	case c.HA != nil && (c.HA.Burst < 0 || c.HA.Tail < 0 || c.HA.bursts()*c.HA.Burst+c.HA.Tail >= c.Intents):
		return fmt.Errorf("ha burst %d (%d of them), tail %d: want 0 or more, together fewer than the intents", c.HA.Burst, c.HA.bursts(), c.HA.Tail)
	case c.HA != nil && !rejoinsFollowKills(c.HA.Steps):
		return errors.New("ha: a Rejoin step must follow a kill, one rejoin per kill")
	case c.HA != nil && c.PoolerSize > 0:
		return errors.New("ha: no pooler (the binaries follow the primary on the multi-host URL themselves)")
	case c.KillEvery > 0 && c.KillEvery < time.Second:
		return fmt.Errorf("kill-every %s: want at least 1s (or negative for no kills)", c.KillEvery)
	case c.PoolerSize < 0 || c.PoolerSize > 1000:
		return fmt.Errorf("pooler size %d: want 0 (no pooler) to 1000", c.PoolerSize)
	case c.DrainTimeout < 0:
		return fmt.Errorf("drain timeout %s: must not be negative", c.DrainTimeout)
	}
	if c.BinDir != "" {
		if fi, err := os.Stat(c.BinDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("bin %q: not a directory", c.BinDir)
		}
	}
	return nil
}

// ErrNoPostgres is returned by [CheckPrerequisites] when the PostgreSQL
// server binaries are not installed.
var ErrNoPostgres = errors.New("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")

// CheckPrerequisites reports whether a run can start here: it needs the
// PostgreSQL server binaries to start, stop and restart a server of its own.
func CheckPrerequisites() error {
	if _, err := devdb.BinDir(); err != nil {
		return ErrNoPostgres
	}
	return nil
}

// rejoinsFollowKills reports whether each Rejoin step follows a kill not
// rejoined yet.
func rejoinsFollowKills(steps []Step) bool {
	down := false
	for _, s := range steps {
		switch s {
		case KillWhilePurchasing, KillWhileAccepting:
			if down {
				return false // the formation has one node left
			}
			down = true
		case Switchover:
			if down {
				return false
			}
		case Rejoin:
			if !down {
				return false
			}
			down = false
		}
	}
	return true
}
