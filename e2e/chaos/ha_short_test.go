package chaos

import (
	"context"
	"strings"
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
// acknowledged is lost.
func TestShortFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pg_auto_failover formation and the fleet; about two minutes")
	}
	if err := failovertest.Available(); err != nil {
		t.Skipf("%v; `go tool task test` installs pg_auto_failover as root", err)
	}
	shortHA(t, Config{Intents: 80, Duration: 30 * time.Second, Workers: 2, APIs: 2, Seed: 3,
		HA: &HA{Formation: failovertest.Start(t, failovertest.Options{}), Steps: []Step{KillWhilePurchasing, Rejoin, Switchover}, Tail: 15}})
}

func shortHA(t *testing.T, cfg Config) *Figures {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg.Progress = testWriter{t}
	fig, err := Run(ctx, cfg)
	require.NoError(t, err)
	var out strings.Builder
	fig.Print(&out)
	t.Log("\n" + out.String())
	require.Empty(t, fig.Violations)
	require.Equal(t, cfg.Intents, fig.Succeeded)
	require.Equal(t, cfg.Intents, fig.CarrierPurchases)
	require.Zero(t, fig.Lost)
	require.Len(t, fig.HA, len(cfg.HA.Steps))
	return fig
}
