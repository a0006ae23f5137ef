package accept_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// Issue 33's held key row on the API side: a session holds an uncommitted
// UPDATE on one key row (a worker frozen inside its transaction) and the
// key's caller sends its replay to an API that has not seen the key. The
// replay is answered from the stored record (202), and every create another
// caller sends meanwhile is accepted (202), all while the row is still held.
// The API's claim wait and store timeout are longer than the test: an accept
// that waited for the row would hold every accept of its shared transaction,
// and of the transactions after it, until the row is let go, which the test
// does only at its end.
func TestHeldKeyRowDelaysNoOtherAccept(t *testing.T) {
	t.Parallel()
	h := newHeldRowHarness(t, httpapi.Deps{Opts: accept.Opts{ClaimWait: time.Hour, Timeout: time.Hour}})
	ctx := fixture.BeforeDeadline(t)
	owner, other := h.caller("owner"), h.caller("other")
	body := stacktest.ParcelBody(1, 1, 100)
	require.Equal(t, http.StatusAccepted, h.create(ctx, h.api(httpapi.Deps{}), owner, "held", body), "taken by another API")

	holder, release := h.holdKeyRow(ctx, "owner", "held")
	replay := make(chan int, 1)
	go func() { replay <- h.create(ctx, h.url, owner, "held", body) }()
	// The creates go once the replay is answered, or is waiting for the row
	// inside a shared transaction.
	replayStatus := 0
	for replayStatus == 0 && !dbtest.Scalar[bool](t, h.pool, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, holder) {
		select {
		case replayStatus = <-replay:
		case <-time.After(10 * time.Millisecond):
		}
	}

	const n = 40
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses[i] = h.create(ctx, h.url, other, fmt.Sprintf("other-%d", i), stacktest.ParcelBody(int64(100+i), 1, 100))
		})
	}
	await(t, ctx, wg.Wait, "the other caller's creates")
	for i, s := range statuses {
		require.Equal(t, http.StatusAccepted, s, "create %d", i)
	}
	if replayStatus == 0 {
		await(t, ctx, func() { replayStatus = <-replay }, "the replay")
	}
	require.Equal(t, http.StatusAccepted, replayStatus, "the replay of the held key")
	require.Equal(t, "idle in transaction", dbtest.Scalar[string](t, h.pool, `SELECT state FROM pg_stat_activity WHERE pid = $1`, holder),
		"the row was held throughout")
	release()
}

// await runs wait and fails t if ctx ends first; the work waited for must
// end with ctx.
func await(t *testing.T, ctx context.Context, wait func(), what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		<-done
	}
	if ctx.Err() != nil {
		t.Fatalf("%s: still waiting at the test's deadline", what)
	}
}

// A row of a shared transaction whose key another accept has claimed and not
// committed is tried again alone, outside the flusher: while it waits for
// that claim, the shared transactions after it store other keys. Once the
// first accept commits, the row is answered as a repeat of its intent. The
// claim wait and the shared transactions' timeout are longer than the test:
// a flusher held by the waiting row would
// store nothing more until the claim goes, which the test lets go only after
// the other keys are stored.
func TestBusyRowWaitsAloneOutsideTheFlusher(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t, "c1")
	ctx := fixture.BeforeDeadline(t)
	first := fixture.Accept("c1", "k1", "lr_first", 1)
	hash, err := accept.Fingerprint(first.Intent.Parcel)
	require.NoError(t, err)
	first.Key.RequestHash, first.Intent.RequestHash = hash, hash
	commit, firstDone := fixture.AcceptHeld(t, ctx, pool, first)

	a := accept.New(accept.Opts{Pool: pool, ClaimWait: time.Hour, Timeout: time.Hour})
	type answer struct {
		d   *accept.Decision
		err error
	}
	repeat := make(chan answer, 1)
	go func() {
		d, err := a.Accept(ctx, "c1", "k1", first.Intent.Parcel)
		repeat <- answer{d, err}
	}()
	// The repeat waits for the first accept's claim.
	for !dbtest.Scalar[bool](t, pool, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`) {
		time.Sleep(10 * time.Millisecond)
	}

	const n = 20
	outcomes := make([]accept.Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d, err := a.Accept(ctx, "c1", fmt.Sprintf("other-%d", i), fixture.Accept("c1", "", "", int64(100+i)).Intent.Parcel)
			if err != nil {
				t.Error(err)
				return
			}
			outcomes[i] = d.Outcome
		})
	}
	await(t, ctx, wg.Wait, "the accepts of other keys")
	for i, o := range outcomes {
		require.Equal(t, accept.Accepted, o, "accept %d", i)
	}
	select {
	case r := <-repeat:
		t.Fatalf("the repeat was answered while the first accept holds its claim: %+v", r)
	default:
	}

	commit()
	require.NoError(t, <-firstDone)
	r := <-repeat
	require.NoError(t, r.err)
	require.Equal(t, accept.Replayed, r.d.Outcome)
	require.Equal(t, "lr_first", r.d.Intent.RequestID)
}
