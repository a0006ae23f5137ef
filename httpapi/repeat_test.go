package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
)

// Every kind of repeat gets the answer of what is stored: pending and
// completed replays, a reused key, a parcel taken under another key, another
// caller's key, a key purged since, and a burst of identical requests (whose
// later members find the key stored by the insert itself).
func TestEveryRepeatOutcome(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	// The first purchase waits for Release, so that k1 is still pending
	// when it is repeated.
	s.Carrier.StallFirst(1)
	tok := s.Token("fulfilment")
	body := stacktest.ParcelBody(918273, 1, 1450)

	lr := s.Accept(tok, "k1", body)
	pending := s.Create(tok, "k1", body)
	require.Equal(t, http.StatusAccepted, pending.Status, string(pending.Body))
	require.Equal(t, "true", pending.Header.Get("Idempotent-Replayed"))
	require.Equal(t, lr.ID, stacktest.Decode[labels.LabelRequest](t, pending.Body).ID)
	requireProblem(t, s.Create(tok, "k1", stacktest.ParcelBody(918273, 1, 1500)), http.StatusUnprocessableEntity, "idempotency_key_reused")
	close(s.Carrier.Release)

	s.WaitFinal(tok, lr.ID)
	saved := s.Create(tok, "k1", body)
	require.Equal(t, http.StatusCreated, saved.Status, string(saved.Body))
	require.Equal(t, "true", saved.Header.Get("Idempotent-Replayed"))
	require.Equal(t, saved.Body, s.Create(tok, "k1", body).Body)

	dup := s.Create(tok, "k2", body)
	require.Equal(t, http.StatusCreated, dup.Status, string(dup.Body))
	require.Equal(t, saved.Body, dup.Body)
	requireProblem(t, s.Create(tok, "k3", stacktest.ParcelBody(918273, 1, 2000)), http.StatusConflict, "parcel_already_labelled")

	other := s.Token("other")
	s.WaitFinal(other, s.Accept(other, "k1", body).ID)

	// The retention passes (by the database's clock, which the sweeper reads).
	_, err := s.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE state = 'completed'`)
	require.NoError(t, err)
	n, err := jobs.Sweep(context.Background(), s.Pool, 100, nil)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(1))
	late := s.Create(tok, "k1", body)
	require.Equal(t, http.StatusCreated, late.Status, string(late.Body))
	require.Equal(t, saved.Body, late.Body)
	require.Equal(t, 1.0, testutil.ToFloat64(s.Metrics.IdempotencyOutcomes.WithLabelValues(metrics.OutcomePurgedKeyReused)))

	// A burst on a new key: each answer is the one intent's, pending (202)
	// or already bought (201).
	burst := stacktest.ParcelBody(5, 1, 100)
	var wg sync.WaitGroup
	statuses, ids := make([]int, 20), make([]string, 20)
	for i := range ids {
		wg.Go(func() {
			r := s.Create(tok, "k5", burst)
			statuses[i] = r.Status
			if r.Status == http.StatusAccepted {
				ids[i] = stacktest.Decode[labels.LabelRequest](t, r.Body).ID
			}
		})
	}
	wg.Wait()
	burstID := ""
	for i, id := range ids {
		require.Contains(t, []int{http.StatusAccepted, http.StatusCreated}, statuses[i])
		if burstID == "" {
			burstID = id
		}
		if id != "" {
			require.Equal(t, burstID, id)
		}
	}
	require.NotEmpty(t, burstID, "the request that stored the key answers 202")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents WHERE caller_id = 'fulfilment' AND order_id = 5`))
	s.WaitFinal(tok, burstID)
	_, total := s.Carrier.Purchases("")
	require.Equal(t, 3, total, "k1, the other caller's k1, and k5: nothing bought twice")
}

// Two API servers on one database: the repeats of keys one of them took are
// answered by the other from what is stored.
func TestTwoServersOneDatabase(t *testing.T) {
	t.Parallel()
	a := stacktest.New(t, stacktest.Opts{NoWorker: true})
	b := stacktest.New(t, stacktest.Opts{NoWorker: true, Pool: a.Pool})
	tok := a.Token("fulfilment")
	for i := range 64 {
		key, body := "r"+strconv.Itoa(i), stacktest.ParcelBody(int64(100+i), 1, 100)
		first := a.Create(tok, key, body)
		require.Equal(t, http.StatusAccepted, first.Status)
		r := b.Create(tok, key, body)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
		require.Equal(t, stacktest.Decode[labels.LabelRequest](t, first.Body).ID, stacktest.Decode[labels.LabelRequest](t, r.Body).ID)
	}
	require.Equal(t, 64.0, testutil.ToFloat64(b.Metrics.IdempotencyOutcomes.WithLabelValues(metrics.OutcomeReplayed)))
}
