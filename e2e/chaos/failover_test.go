package chaos

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/failovertest"
)

// The short failover run of go test: a pg_auto_failover formation (monitor,
// primary, synchronous standby), 2 APIs and 2 workers on its multi-host
// URL; under a steady load the primary is killed with SIGKILL while
// purchases are in flight, the killed node rejoins as a standby, then a
// planned switchover. Every check of the run holds, and nothing
// acknowledged is lost. The load is planned for 90 s, more than the steps
// take (a rejoin may take 40 s); what is not sent when they are over is
// dropped.
func TestShortFailover(t *testing.T) {
	failovertest.SkipUnlessAvailable(t) // go tool task test installs pg_auto_failover as root
	cfg := Config{Intents: 300, Duration: 120 * time.Second, Workers: 2, APIs: 2, Seed: 3,
		HA: &HA{Formation: failovertest.Start(t, failovertest.Options{}), Steps: []Step{KillWhilePurchasing, Rejoin, Switchover}, Tail: 15}}
	fig := runLogged(t, cfg)
	require.Positive(t, fig.Intents)
	require.Equal(t, fig.Intents, fig.Succeeded, "every intent sent succeeded")
	require.Equal(t, fig.Intents, fig.CarrierPurchases)
	require.Zero(t, fig.Lost)
	require.Len(t, fig.HA, len(cfg.HA.Steps))
}

// fullFailover is TestFullRun with --ha (go tool task chaos HA=1): on a
// formation with a synchronous standby, the primary killed while purchases
// are in flight, the node rejoining, killed again while a burst of creates
// is in flight, rejoining, then a planned switchover, every check held and
// nothing acknowledged lost; then, on a formation with an asynchronous
// standby, --async-kills kills each right after a burst of creates,
// counting what was acknowledged and lost (a measurement: no check fails on
// it). --seed, --bin and --log-dir apply, and --intents and --duration to
// the first run (1200 and 300s unless given).
func fullFailover(ctx context.Context, t *testing.T, progress io.Writer) {
	f := fullRun
	if err := failovertest.Available(); err != nil {
		t.Fatalf("%v: go tool task pgautofailover installs it", err)
	}
	// Unless told otherwise, 5 creates a second for 225 s: more than the
	// steps take (a rejoin may take 40 s).
	intents, duration := 1200, 300*time.Second
	flag.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "intents":
			intents = *f.intents
		case "duration":
			duration = *f.duration
		}
	})
	syncRun := Config{Intents: intents, Duration: duration, Workers: 2, APIs: 2, Seed: *f.seed,
		DrainTimeout: *f.drain, BinDir: *f.bin, LogDir: *f.logDir, Progress: progress,
		HA: &HA{Formation: failovertest.Start(t, failovertest.Options{}), Burst: 20, Tail: 30,
			Steps: []Step{KillWhilePurchasing, Rejoin, KillWhileAccepting, Rejoin, Switchover}}}
	fig, err := Run(ctx, syncRun)
	require.NoError(t, err)
	fig.Print(os.Stdout)
	require.True(t, fig.OK(), "violations: %v", fig.Violations)
	require.Zero(t, fig.Lost)

	var steps []Step
	for i := range *f.asyncKills {
		if i > 0 {
			steps = append(steps, Rejoin)
		}
		steps = append(steps, KillWhileAccepting)
	}
	duration = time.Duration(40+100**f.asyncKills) * time.Second
	async := Config{Intents: int(duration.Seconds()*0.75*5) + 40**f.asyncKills + 20, Duration: duration, Workers: 2, APIs: 2,
		Seed: *f.seed + 1, DrainTimeout: *f.drain, BinDir: *f.bin, Progress: progress,
		HA: &HA{Formation: failovertest.Start(t, failovertest.Options{Async: true}), Async: true, Burst: 40, Tail: 20, Steps: steps}}
	fig, err = Run(ctx, async)
	require.NoError(t, err)
	fig.Print(os.Stdout)
	fmt.Printf("The asynchronous standby lost %d of %d acknowledged creates over %d kills (a measurement, not a check: a lost intent also breaks other checks, %d violations above)\n",
		fig.Lost, fig.Acknowledged, *f.asyncKills, len(fig.Violations))
}
