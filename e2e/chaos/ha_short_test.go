package chaos

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/replicatest"
)

// pairFormation is a replicatest pair as a formation: the test promotes the
// standby as a monitor would.
type pairFormation struct {
	t testing.TB
	*replicatest.Pair
}

func (p pairFormation) KillPrimary()                 { p.Pair.KillPrimary() }
func (p pairFormation) WaitPrimary(context.Context)  { p.Promote() }
func (p pairFormation) Switchover(context.Context)   { p.t.Fatal("no switchover without a monitor") }
func (p pairFormation) Rejoin(context.Context)       { p.t.Fatal("no rejoin without a monitor") }
func (p pairFormation) State(context.Context) string { return "replicatest pair" }

func TestShortHA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a formation and the fleet")
	}
	if err := CheckPrerequisites(); errors.Is(err, ErrNoPostgres) {
		t.Skip(err)
	}
	f := pairFormation{t: t, Pair: replicatest.New(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg := Config{Intents: 80, Duration: 30 * time.Second, Workers: 2, APIs: 2, Seed: 3,
		HA: &HA{Formation: f, Steps: []Step{KillWhileAccepting}, Burst: 20}}
	cfg.Progress = testWriter{t}
	fig, err := Run(ctx, cfg)
	require.NoError(t, err)
	var out strings.Builder
	fig.Print(&out)
	t.Log("\n" + out.String())
	require.Empty(t, fig.Violations)
}
