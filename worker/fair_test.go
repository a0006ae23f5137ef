package worker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/worker"
)

// One caller's burst delays mainly its own intents. The worker has one slot,
// held by a stalled carrier call (its intake is gated); caller "burst"
// queues 60 intents, then caller "other" one. Once the gate opens, the
// other caller's label is bought before most of the burst's: the relay
// moves only a bounded backlog into River, which runs its queue in order,
// and takes the callers in turns. Order of purchase, not time, is what is
// checked (the carrier numbers its labels as it sells them).
func TestBurstDelaysMainlyItsOwnCaller(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	burst, other := s.Token("burst"), s.Token("other")

	carrier := stacktest.NewFakeCarrier()
	stalled := carrier.StallFirst(1)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := worker.New(worker.Config{
		Pool: s.Pool, Carrier: carrier, Concurrency: 1, SweepInterval: -1, RetryBase: 10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 20 * time.Millisecond, RelayPollInterval: 50 * time.Millisecond,
		TestOnly: true, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	var gate sync.Once
	open := func() { gate.Do(func() { close(carrier.Release) }) }
	t.Cleanup(func() {
		open()
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	})

	// The first intent of the burst takes the only slot and stalls there.
	const n = 60
	s.Accept(burst, "b-0", stacktest.ParcelBody(1000, 1, 100))
	waitFor(t, "the first purchase to start", stalled)

	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { s.Accept(burst, fmt.Sprintf("b-%d", i), stacktest.ParcelBody(int64(1000+i), 1, 100)) })
	}
	wg.Wait()
	mine := s.Accept(other, "o-0", stacktest.ParcelBody(1, 1, 100))

	open()
	waitFor(t, "every intent final", func() bool {
		return s.Count(`SELECT count(*) FROM label_intents WHERE status <> 'pending'`) == n+1
	})

	// The carrier's label ids count its sales: CL-1, CL-2, ...
	rows, err := s.Pool.Query(ctx, `SELECT request_id, carrier_label_id FROM labels`)
	require.NoError(t, err)
	seq := map[string]int{}
	for rows.Next() {
		var id, cl string
		require.NoError(t, rows.Scan(&id, &cl))
		k, err := strconv.Atoi(strings.TrimPrefix(cl, "CL-"))
		require.NoError(t, err, cl)
		seq[id] = k
	}
	require.NoError(t, rows.Err())
	require.Len(t, seq, n+1)
	before := 0
	for id, k := range seq {
		if id != mine.ID && k < seq[mine.ID] {
			before++
		}
	}
	t.Logf("the other caller's label was bought after %d of the burst's", before)
	require.Less(t, before, n/2, "the other caller's label was bought after %d of the burst's %d", before, n)
}

// waitFor polls cond until it holds; a generous deadline only ends a test
// that would otherwise hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
