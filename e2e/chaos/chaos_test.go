package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/pgbouncer"
	"github.com/labelkit/labels/internal/testutil/failovertest"
)

// The short run of CI: about 100 intents, a worker killed every 4 s for 25 s,
// the API killed once, PostgreSQL restarted once, then the drain (most of a
// minute after the last kill) and every check. Under two minutes on two cores.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and the fleet; about two minutes")
	}
	if err := CheckPrerequisites(); errors.Is(err, ErrNoPostgres) {
		t.Skip(err)
	}
	shortRun(t, Config{Intents: 100, Duration: 25 * time.Second, KillEvery: 4 * time.Second, Seed: 1})
}

// shortRun runs cfg and holds it to every check: no violation, each intent
// bought once and replayed, one distinct webhook-id per final intent and none
// lost, workers and the API killed and PostgreSQL restarted on the way.
func shortRun(t *testing.T, cfg Config) {
	t.Helper()
	fig := runLogged(t, cfg)
	require.Equal(t, cfg.Intents, fig.Succeeded)
	require.Equal(t, cfg.Intents, fig.CarrierPurchases)
	require.Equal(t, cfg.Intents, fig.ReplaysChecked)
	require.Equal(t, cfg.Intents, fig.WebhookIDs, "one distinct webhook-id per final intent")
	require.Zero(t, fig.WebhooksLost)
	require.Positive(t, fig.WebhookRefused, "some deliveries were retried")
	require.Positive(t, fig.WorkerKills)
	require.Equal(t, 1, fig.APIKills)
	require.Equal(t, 1, fig.DBRestarts)
	require.Positive(t, fig.Answers[503], "the PostgreSQL restart is seen as 503 store_unavailable")
}

// The short run through PgBouncer in transaction mode, four server
// connections for the whole fleet, server_reset_query empty: the API and
// workers 1 and 3 listen on the direct connection, worker 2 polls. Every
// check of the short run holds.
func TestShortRunThroughPgBouncer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, PgBouncer and the fleet; about two minutes")
	}
	if err := CheckPrerequisites(); errors.Is(err, ErrNoPostgres) {
		t.Skip(err)
	}
	if _, err := pgbouncer.Binary(); err != nil {
		t.Skipf("%v; `go tool task test` installs it as root", err)
	}
	shortRun(t, Config{Intents: 60, Duration: 20 * time.Second, KillEvery: 4 * time.Second, Seed: 2, PoolerSize: 4})
}

// runLogged runs cfg, its progress and figures in the test log, and
// requires that it could be carried out and no check failed.
func runLogged(t *testing.T, cfg Config) *Figures {
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
	return fig
}

// Every rendering of an intent is the same request: it decodes to the same
// values once the defaults are applied, and has the same canonical form; the
// renderings differ in their bytes.
func TestRenderingsAreOneRequest(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		p := newParcel(rng, int64(1000+i), 1+i%3)
		want := canonical(t, p.render(0, nil))
		seen := map[string]bool{}
		for range 20 {
			b := p.render(1, rng)
			require.True(t, json.Valid(b), "%s", b)
			require.Equal(t, want, canonical(t, b), "%s", b)
			seen[string(b)] = true
		}
		require.Greater(t, len(seen), 10, "renderings vary")
	}
}

// canonical decodes a body as the API's parcel, applies the defaults and
// returns its canonical JSON.
func canonical(t *testing.T, body []byte) string {
	t.Helper()
	var p labels.Parcel
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p), "%s", body)
	if p.LabelVersion == 0 {
		p.LabelVersion = 1
	}
	c, err := idempotency.Canonical(p)
	require.NoError(t, err)
	return string(c)
}

func TestJSONStringEscapes(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"München", "東京", "a\"b\\c", "tab\there", "😀 emoji"} {
		for _, all := range []bool{false, true} {
			var got string
			require.NoError(t, json.Unmarshal(jsonString(s, all), &got))
			require.Equal(t, s, got)
			if all {
				require.True(t, isASCII(jsonString(s, all)), "%s", jsonString(s, all))
			}
		}
	}
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c > 0x7e {
			return false
		}
	}
	return true
}

func TestValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.Validate())
	f := &failovertest.Formation{} // only named: Validate starts nothing
	for _, c := range []Config{
		{Intents: 1},
		{Duration: time.Second},
		{Workers: 30},
		{KillEvery: 100 * time.Millisecond},
		{BinDir: "/nonexistent"},
		{APIs: 9},
		{HA: &HA{Steps: []Step{KillWhilePurchasing}}}, // no formation
		{HA: &HA{Formation: f}},                       // no step
		{HA: &HA{Formation: f, Steps: []Step{Rejoin}}},
		{HA: &HA{Formation: f, Steps: []Step{KillWhilePurchasing, Switchover}}},
		{HA: &HA{Formation: f, Steps: []Step{KillWhilePurchasing, KillWhileAccepting}}},
		{HA: &HA{Formation: f, Steps: []Step{KillWhileAccepting, Rejoin, KillWhileAccepting}, Burst: 150}, Intents: 300},
		{HA: &HA{Formation: f, Steps: []Step{Switchover}}, PoolerSize: 4},
	} {
		require.Error(t, c.Validate(), "%+v", c)
	}
	for _, steps := range [][]Step{{Switchover}, {KillWhileAccepting}, {KillWhilePurchasing, Rejoin, KillWhileAccepting, Rejoin, Switchover}} {
		require.NoError(t, Config{HA: &HA{Formation: f, Steps: steps, Burst: 20, Tail: 20}}.Validate(), "%v", steps)
	}
}

// testWriter sends each line of progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
