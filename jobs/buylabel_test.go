package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
)

// The carrier bought the label but the reply was lost: the retry, under the
// same carrier key, gets the same label back, and only one is bought.
func TestLostReplyGetsTheSameLabel(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	s.Carrier.Script = func(call int, _ string) string {
		if call == 1 {
			return "drop"
		}
		return ""
	}
	tok := s.Token("fulfilment")
	lr := s.Accept(tok, "label:918273:1:v1", stacktest.ParcelBody(918273, 1, 1450))
	final := s.Final(tok, lr.ID)
	require.Equal(t, "succeeded", final.Status)
	require.Equal(t, 2, s.Carrier.Calls())
	_, total := s.Carrier.Purchases("")
	require.Equal(t, 1, total)
	require.Equal(t, "CL-1", stacktest.Decode[map[string]any](t, final.Label)["carrier_label_id"])
	require.Equal(t, 2, s.Count(`SELECT attempt FROM river_job WHERE args->>'request_id' = $1`, lr.ID), "the second job attempt bought it")
	require.True(t, dbtest.Scalar[bool](t, s.Pool, `SELECT attempts IS NULL FROM idempotency_keys WHERE request_id = $1`, lr.ID), "the count is cleared on completion")
}

// A permanent rejection is saved as 422 carrier_rejected with the carrier's
// code, and replayed; a new key for the parcel is a new intent.
func TestCarrierRejectionIsSavedAndReplayed(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	s.Carrier.Script = func(int, string) string { return "reject" }
	tok := s.Token("fulfilment")
	body := stacktest.ParcelBody(7, 1, 100)
	lr := s.Accept(tok, "k-reject", body)
	final := s.Final(tok, lr.ID)
	require.Equal(t, "failed", final.Status)
	p := stacktest.Decode[map[string]any](t, final.Error)
	require.Equal(t, "carrier_rejected", p["code"])
	require.Equal(t, "address_invalid", p["carrier_code"])
	require.Equal(t, "no such postal code", p["carrier_message"])

	replay := s.Create(tok, "k-reject", body)
	require.Equal(t, http.StatusUnprocessableEntity, replay.Status)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "application/problem+json", replay.Header.Get("Content-Type"))
	require.JSONEq(t, string(final.Error), string(replay.Body))
	require.Equal(t, 1, s.Carrier.Calls(), "a permanent rejection is not retried")

	// A failed intent does not block its parcel: a new key is a new intent.
	s.Carrier.Script = nil
	again := s.Accept(tok, "k-reject-2", body)
	require.NotEqual(t, lr.ID, again.ID)
	require.Equal(t, "succeeded", s.Final(tok, again.ID).Status)
}

// A carrier that stays unreachable through MAX_ATTEMPTS gives a saved 502.
func TestCarrierUnavailableAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{MaxAttempts: 3})
	s.Carrier.Script = func(int, string) string { return "unavailable" }
	tok := s.Token("fulfilment")
	lr := s.Accept(tok, "k-502", stacktest.ParcelBody(8, 1, 100))
	final := s.Final(tok, lr.ID)
	require.Equal(t, "failed", final.Status)
	require.Equal(t, "carrier_unavailable", stacktest.Decode[map[string]any](t, final.Error)["code"])
	require.Equal(t, 3, s.Carrier.Calls())
	replay := s.Create(tok, "k-502", stacktest.ParcelBody(8, 1, 100))
	require.Equal(t, http.StatusBadGateway, replay.Status)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
}

// Fencing: attempt 1 stalls inside the carrier call and loses its lease;
// attempt 2 takes over and completes; when attempt 1 resumes it writes nothing.
// The stall ends when the test releases it, never by the carrier timeout: a
// timed-out call would end as an unknown outcome, not a fenced completion.
func TestFencingStalledAttemptWritesNothing(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{LeaseDuration: 2 * time.Minute, CarrierTimeout: time.Minute})
	stalled := s.Carrier.StallFirst(1)
	tok := s.Token("fulfilment")
	lr := s.Accept(tok, "k-fence", stacktest.ParcelBody(9, 1, 100))
	require.Eventually(t, stalled, 30*time.Second, 10*time.Millisecond)

	// The lease runs out and the rescuer hands the job to a new attempt.
	s.TakeOver(lr.ID)

	final := s.Final(tok, lr.ID)
	require.Equal(t, "succeeded", final.Status)
	require.Equal(t, 1.0, testutil.ToFloat64(s.Metrics.LeaseTakeovers))
	labelBefore := dbtest.Scalar[string](t, s.Pool, `SELECT label_id FROM labels`)
	bodyBefore := dbtest.Scalar[string](t, s.Pool, `SELECT response_body::text FROM idempotency_keys WHERE idem_key = 'k-fence'`)

	close(s.Carrier.Release) // attempt 1 resumes with the carrier's answer
	require.Eventually(t, func() bool { return testutil.ToFloat64(s.Metrics.FencingRejections) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM labels`))
	require.Equal(t, labelBefore, dbtest.Scalar[string](t, s.Pool, `SELECT label_id FROM labels`))
	require.Equal(t, bodyBefore, dbtest.Scalar[string](t, s.Pool, `SELECT response_body::text FROM idempotency_keys WHERE idem_key = 'k-fence'`))
	_, total := s.Carrier.Purchases("")
	require.Equal(t, 1, total)
}

// A crash between the carrier call and transaction 2 (the lease is left
// behind) is finished by another attempt once the lease expires, with the
// same label. The lease runs out when the test says so (ExpireLease), not on
// a short timer racing the attempts.
func TestCrashAfterCarrierCallIsFinishedByAnotherAttempt(t *testing.T) {
	t.Parallel()
	var crashed atomic.Bool
	s := stacktest.New(t, stacktest.Opts{
		LeaseDuration:  2 * time.Minute,
		CarrierTimeout: time.Minute,
		AfterCarrierFunc: func(context.Context, string) error {
			if crashed.CompareAndSwap(false, true) {
				return errors.New("injected crash after the carrier call")
			}
			return nil
		},
	})
	tok := s.Token("fulfilment")
	lr := s.Accept(tok, "k-crash", stacktest.ParcelBody(10, 1, 100))
	require.Eventually(t, func() bool {
		if crashed.Load() {
			s.ExpireLease(lr.ID)
		}
		return dbtest.Scalar[string](t, s.Pool, `SELECT status FROM label_intents WHERE request_id = $1`, lr.ID) != "pending"
	}, time.Minute, 20*time.Millisecond)
	final := s.Final(tok, lr.ID)
	require.Equal(t, "succeeded", final.Status)
	require.True(t, crashed.Load())
	require.Equal(t, 2, s.Carrier.Calls())
	_, total := s.Carrier.Purchases("")
	require.Equal(t, 1, total)
	require.Equal(t, "CL-1", stacktest.Decode[map[string]any](t, final.Label)["carrier_label_id"])
	require.GreaterOrEqual(t, testutil.ToFloat64(s.Metrics.LeaseTakeovers), 1.0)
}

// The lease primitives: a live lease is refused, an expired one is taken
// over, a completion with a stale token is fenced.
func TestLeaseTakeoverAndFencing(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	s.Accept(tok, "k-lease", stacktest.ParcelBody(11, 1, 100))
	ctx := context.Background()
	requestID := dbtest.Scalar[string](t, s.Pool, `SELECT request_id FROM idempotency_keys WHERE idem_key = 'k-lease'`)
	attempts := 0
	lease := func() postgres.LeaseOutcome {
		outs, err := postgres.TakeLeases(ctx, s.Pool, []postgres.LeaseRow{{RequestID: requestID, Token: uuid.New()}}, time.Minute)
		require.NoError(t, err)
		if outs[0].Result == postgres.Leased {
			attempts++
			require.Equal(t, attempts, outs[0].Attempt, "each lease counts one attempt on the key")
		}
		return outs[0]
	}
	token := func() uuid.UUID {
		return dbtest.Scalar[uuid.UUID](t, s.Pool, `SELECT lease_token FROM idempotency_keys`)
	}
	complete := func(tok uuid.UUID) postgres.CompleteResult {
		p := labels.NewProblem(labels.CodeCarrierRejected, "rejected")
		body := []byte(`{"a": 1}`)
		rs, err := postgres.Complete(ctx, s.Pool, []postgres.Completion{{RequestID: requestID, CallerID: "fulfilment", Key: "k-lease",
			Token: tok, Status: p.Status, Body: body}}, time.Hour)
		require.NoError(t, err)
		return rs[0]
	}
	l := lease()
	require.Equal(t, postgres.Leased, l.Result)
	require.False(t, l.Takeover)
	first := token()
	held := lease()
	require.Equal(t, postgres.LeaseHeld, held.Result)
	require.WithinDuration(t, time.Now().Add(time.Minute), held.HeldUntil, 10*time.Second)

	_, err := s.Pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 ms'`)
	require.NoError(t, err)
	l = lease()
	require.Equal(t, postgres.Leased, l.Result)
	require.True(t, l.Takeover)
	second := token()
	require.NotEqual(t, first, second)

	require.Equal(t, postgres.CompleteFenced, complete(first))
	require.Equal(t, "started", dbtest.Scalar[string](t, s.Pool, `SELECT state::text FROM idempotency_keys`))
	require.Equal(t, postgres.Completed, complete(second))
	require.Equal(t, `{"a": 1}`, dbtest.Scalar[string](t, s.Pool, `SELECT response_body::text FROM idempotency_keys`), "the body is saved byte for byte")
	require.Equal(t, postgres.LeaseFinal, lease().Result)
}

// Shutdown never abandons a started carrier call: even a hard stop that
// cancels the job's context lets the call finish and saves its outcome. The
// attempt goes on to its completion only once the stop has cancelled its
// context (a latch after the carrier call), so the save always follows the
// cancellation, however the machine schedules them.
func TestShutdownFinishesTheCarrierCall(t *testing.T) {
	t.Parallel()
	var cancelled atomic.Bool
	s := stacktest.New(t, stacktest.Opts{LeaseDuration: 2 * time.Minute, CarrierTimeout: time.Minute,
		AfterCarrierFunc: func(ctx context.Context, _ string) error {
			<-ctx.Done() // the job's own context: cancelled by the stop
			cancelled.Store(true)
			return nil
		}})
	var inFlight atomic.Bool
	s.Carrier.Script = func(int, string) string {
		inFlight.Store(true)
		return "slow"
	}
	tok := s.Token("fulfilment")
	lr := s.Accept(tok, "k-shutdown", stacktest.ParcelBody(12, 1, 100))
	require.Eventually(t, inFlight.Load, 30*time.Second, 10*time.Millisecond)

	stopped := make(chan error, 1)
	go func() { stopped <- s.River.StopAndCancel(context.Background()) }()
	close(s.Carrier.Release)
	require.NoError(t, <-stopped)
	require.True(t, cancelled.Load(), "the outcome was saved after the job's context was cancelled")
	require.Equal(t, "succeeded", dbtest.Scalar[string](t, s.Pool, `SELECT status FROM label_intents WHERE request_id = $1`, lr.ID))
	require.Equal(t, "completed", dbtest.Scalar[string](t, s.Pool, `SELECT state::text FROM idempotency_keys WHERE idem_key = 'k-shutdown'`))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM labels`))
}

// Many labels at once, with the worker's shared statements and without: each
// parcel gets exactly one label, bought once, its key completed with it.
func TestManyLabelsAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
	}{{"shared statements", 0}, {"one transaction per job", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stacktest.New(t, stacktest.Opts{BatchMax: tc.batch})
			tok := s.Token("fulfilment")
			const n = 120
			ids := make([]string, n)
			for i := range n {
				ids[i] = s.Accept(tok, fmt.Sprintf("label:%d:1:v1", 5000+i), stacktest.ParcelBody(int64(5000+i), 1, 100)).ID
			}
			for _, id := range ids {
				require.Equal(t, "succeeded", s.Final(tok, id).Status)
			}
			_, total := s.Carrier.Purchases("")
			require.Equal(t, n, total)
			require.Equal(t, n, s.Count(`SELECT count(*) FROM labels`))
			require.Equal(t, n, s.Count(`SELECT count(*) FROM idempotency_keys k JOIN labels l ON l.request_id = k.request_id
			    WHERE k.state = 'completed' AND k.response_status = 201 AND k.response_body->>'label_id' = l.label_id`))
			require.Equal(t, n, s.Count(`SELECT count(*) FROM label_intents i JOIN idempotency_keys k ON k.request_id = i.request_id
			    WHERE i.status = 'succeeded' AND k.state = 'completed' AND k.attempts IS NULL`))
		})
	}
}
