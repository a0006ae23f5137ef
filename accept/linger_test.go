package accept

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/clocktest"
	"github.com/labelkit/labels/internal/testutil/fixture"
)

// Two accepts arriving within the linger share one transaction (their rows
// carry one xmin), each answered only once it committed; an accept after a
// batch of LingerFew runs at once; and the linger is bounded: when it ends
// with no other accept, the one in hand commits alone. The linger's timer
// is the test's: it expires when the test says.
func TestLingerSharesOneCommit(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := fixture.BeforeDeadline(t)
	a := New(Opts{Pool: pool, Linger: time.Hour})
	ft := clocktest.NewTimer()
	a.shared.Timer, a.shared.LingerFew = ft.Start, 2

	accept := func(key string, order int64) <-chan error {
		done := make(chan error, 1)
		go func() {
			p := fixture.Accept("c1", key, "", order).Intent.Parcel
			d, err := a.Accept(ctx, "c1", key, p)
			if err == nil && d.Outcome != Accepted {
				t.Errorf("%s: %s, want %s", key, d.Outcome, Accepted)
			}
			done <- err
		}()
		return done
	}
	// xmin is the transaction that stored the key; readable only once committed.
	xmin := func(key string) string {
		var x string
		require.NoError(t, pool.QueryRow(ctx, `SELECT xmin::text FROM idempotency_keys WHERE caller_id = 'c1' AND idem_key = $1`, key).Scan(&x))
		return x
	}

	first := accept("k1", 1)
	select {
	case d := <-ft.Started:
		require.Equal(t, time.Hour, d)
	case err := <-first:
		t.Fatalf("the first accept did not linger (err %v)", err)
	}
	second := accept("k2", 2)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.Equal(t, xmin("k1"), xmin("k2"), "the two accepts shared one transaction")

	third := accept("k3", 3)
	select {
	case <-ft.Started:
		t.Fatal("an accept after a batch of LingerFew lingered")
	case err := <-third:
		require.NoError(t, err)
	}

	fourth := accept("k4", 4)
	<-ft.Started // after a batch of one, it lingers again
	ft.Expire()
	require.NoError(t, <-fourth)
	require.NotEqual(t, xmin("k3"), xmin("k4"))
	require.NotEqual(t, xmin("k1"), xmin("k4"))
}
