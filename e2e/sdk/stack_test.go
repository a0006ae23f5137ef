package sdk_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/metrics"
)

// These tests run the client against the real API, relay and workers, which
// buy from the carrier simulator over HTTP, with the API behind a front that
// fails requests, drops replies and restarts the API.

func parcel(order int64, no int) client.Parcel {
	return client.Parcel{OrderID: order, ParcelNo: no, WeightG: 1450, Service: "ground", ShipTo: client.Address{
		Name: "A. Example", Line1: "1 Example Street", City: "Exampleton", PostalCode: "10115", Country: "DE",
	}}
}

// newClient returns a client with short delays, so that tests stay fast; the
// bounds are generous so that only the behaviour under test ends a call.
func newClient(s *stacktest.SimStack, token string, opts ...client.Option) *client.Client {
	return client.New(s.URL, token, append([]client.Option{
		client.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		client.WithMaxAttempts(100),
		client.WithMaxElapsed(30 * time.Second),
		client.WithWait(10 * time.Second),
		client.WithMaxWait(30 * time.Second),
		client.WithPollInterval(20 * time.Millisecond),
	}, opts...)...)
}

// createAll creates the parcels' labels all at once and returns them in the
// parcels' order; an error fails the test.
func createAll(t *testing.T, c *client.Client, parcels []client.Parcel) []*client.Label {
	t.Helper()
	got := make([]*client.Label, len(parcels))
	var wg sync.WaitGroup
	for i, p := range parcels {
		wg.Go(func() {
			l, err := c.CreateLabel(ctx(t), p)
			if err != nil {
				t.Errorf("parcel %d/%d: %v", p.OrderID, p.ParcelNo, err)
			}
			got[i] = l
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	return got
}

// restartOnFirst restarts the API at the first request, if it is a method
// request.
func restartOnFirst(method string) func(int, *http.Request) stacktest.Fault {
	return func(n int, r *http.Request) stacktest.Fault {
		if r.Method == method && n == 1 {
			return stacktest.FaultRestart
		}
		return stacktest.FaultNone
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// requireOneLabel checks what the seed is about: the parcel has exactly one
// label, bought once from the carrier, under one intent; every attempt sent
// the same key; and asking again returns the same label.
func requireOneLabel(t *testing.T, s *stacktest.SimStack, c *client.Client, p client.Parcel, got *client.Label) {
	t.Helper()
	require.NotNil(t, got)
	require.Equal(t, p.OrderID, got.OrderID)
	require.Equal(t, p.ParcelNo, got.ParcelNo)
	require.NotEmpty(t, got.TrackingNo)
	require.Equal(t, 1, s.Purchases(p.OrderID, p.ParcelNo), "carrier purchases of parcel %d/%d", p.OrderID, p.ParcelNo)
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents WHERE order_id = $1 AND parcel_no = $2`, p.OrderID, p.ParcelNo))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM labels WHERE order_id = $1 AND parcel_no = $2`, p.OrderID, p.ParcelNo))

	// A client that minted a key per attempt would be caught by the parcel's
	// natural key, and counted: nothing of the kind happened.
	require.Zero(t, testutil.ToFloat64(s.Metrics.IdempotencyOutcomes.WithLabelValues(metrics.OutcomeDuplicate)),
		"requests for a labelled parcel under a new key")
	require.NotZero(t, postsWithKey(s, p))
	again, err := c.CreateLabel(ctx(t), p)
	require.NoError(t, err)
	require.Equal(t, *got, *again)
	require.Equal(t, 1, s.Purchases(p.OrderID, p.ParcelNo))
}

// postsWithKey counts the POSTs the API's front saw for the parcel's key.
func postsWithKey(s *stacktest.SimStack, p client.Parcel) int {
	return postsWith(s, client.DeriveKey(p))
}

// postsWith counts the POSTs the API's front saw with key (the client sends
// the draft's quoted form).
func postsWith(s *stacktest.SimStack, key string) int {
	n := 0
	for _, seen := range s.Faults.Seen() {
		if seen.Method == http.MethodPost && seen.Key == `"`+key+`"` {
			n++
		}
	}
	return n
}

// The seed's story, over and over: the reply is lost after the API did the
// work (and the carrier loses replies to the worker too); the retry carries
// the same key and gets the same label.
func TestLostReplies(t *testing.T) {
	t.Parallel()
	s := stacktest.NewSim(t, stacktest.SimOpts{Sim: sim.Options{DropReplyRate: 0.5, Seed: 7}, MaxAttempts: 30})
	tok := s.Token("fulfilment")
	// Every other request of each kind loses its reply: the first POST, the
	// first poll of each request…
	s.Faults.Script(func(n int, r *http.Request) stacktest.Fault {
		if n%2 == 1 {
			return stacktest.FaultDrop
		}
		return stacktest.FaultNone
	})

	t.Run("waiting", func(t *testing.T) {
		c := newClient(s, tok)
		for no := 1; no <= 3; no++ {
			p := parcel(918273, no)
			got, err := c.CreateLabel(ctx(t), p)
			require.NoError(t, err)
			require.GreaterOrEqual(t, postsWithKey(s, p), 2, "the first reply was lost, so the label came from a retry")
			requireOneLabel(t, s, c, p, got)
		}
	})
	t.Run("polling", func(t *testing.T) {
		c := newClient(s, tok, client.WithWait(0))
		for no := 1; no <= 3; no++ {
			p := parcel(5550001, no)
			got, err := c.CreateLabel(ctx(t), p)
			require.NoError(t, err)
			requireOneLabel(t, s, c, p, got)
		}
	})
	require.NotZero(t, s.Sim.Stats().Dropped, "the carrier dropped replies to the worker too")
}

// 503s and the other transient answers a caller meets between it and the
// API, many callers at once, while the carrier fails half its calls.
func TestTransientAnswers(t *testing.T) {
	t.Parallel()
	s := stacktest.NewSim(t, stacktest.SimOpts{Sim: sim.Options{FailRate: 0.5, Seed: 11}, MaxAttempts: 40})
	tok := s.Token("fulfilment")
	faults := []stacktest.Fault{stacktest.Fault503, stacktest.Fault500, stacktest.FaultGateway502,
		stacktest.Fault504, stacktest.Fault429, stacktest.FaultDrop, stacktest.Fault503}
	s.Faults.Script(func(n int, r *http.Request) stacktest.Fault {
		if r.Method == http.MethodPost && n <= 3*len(faults) {
			return faults[(n-1)%len(faults)]
		}
		return stacktest.FaultNone
	})

	c := newClient(s, tok)
	parcels := []client.Parcel{parcel(1001, 1), parcel(1001, 2), parcel(1002, 1), parcel(1003, 1), parcel(1004, 1)}
	got := createAll(t, c, parcels)
	for i, p := range parcels {
		requireOneLabel(t, s, c, p, got[i])
	}
	require.Equal(t, 5, s.Count(`SELECT count(*) FROM idempotency_keys`), "one key per parcel, however many attempts")
	require.NotZero(t, s.Sim.Stats().Failed, "the carrier failed calls too")
}

// The API process dies after it accepted the request and before it answered;
// connections are refused for a moment; a new process answers the retry.
func TestAPIRestart(t *testing.T) {
	t.Parallel()
	s := stacktest.NewSim(t, stacktest.SimOpts{Sim: sim.Options{DropReplyRate: 0.3, Seed: 3}, MaxAttempts: 30})
	tok := s.Token("fulfilment")

	t.Run("during the POST", func(t *testing.T) {
		s.Faults.Script(restartOnFirst(http.MethodPost))
		c := newClient(s, tok)
		p := parcel(918273, 1)
		got, err := c.CreateLabel(ctx(t), p)
		require.NoError(t, err)
		require.Equal(t, 1, s.Restarts())
		require.GreaterOrEqual(t, postsWithKey(s, p), 2)
		requireOneLabel(t, s, c, p, got)
	})
	t.Run("while polling", func(t *testing.T) {
		before := s.Restarts()
		s.Faults.Script(restartOnFirst(http.MethodGet))
		c := newClient(s, tok, client.WithWait(0))
		p := parcel(918274, 1)
		got, err := c.CreateLabel(ctx(t), p)
		require.NoError(t, err)
		require.Equal(t, before+1, s.Restarts())
		requireOneLabel(t, s, c, p, got)
	})
	t.Run("many callers", func(t *testing.T) {
		before := s.Restarts()
		var posts sync.Mutex
		n := 0
		s.Faults.Script(func(_ int, r *http.Request) stacktest.Fault {
			posts.Lock()
			defer posts.Unlock()
			if r.Method == http.MethodPost {
				if n++; n == 4 {
					return stacktest.FaultRestart // cuts every request in flight
				}
			}
			return stacktest.FaultNone
		})
		c := newClient(s, tok)
		parcels := []client.Parcel{parcel(2001, 1), parcel(2001, 2), parcel(2002, 1), parcel(2003, 1), parcel(2004, 1), parcel(2005, 1)}
		got := createAll(t, c, parcels)
		require.Equal(t, before+1, s.Restarts())
		for i, p := range parcels {
			requireOneLabel(t, s, c, p, got[i])
		}
	})
}

// Final answers are returned at once, each with its own error, and never
// retried; a saved failure is not mistaken for a transient 5xx.
func TestFinalOutcomes(t *testing.T) {
	t.Parallel()
	s := stacktest.NewSim(t, stacktest.SimOpts{Sim: sim.Options{RejectPostalCode: "99999"}, MaxAttempts: 2})
	tok := s.Token("fulfilment")
	c := newClient(s, tok)

	t.Run("rejected by the carrier", func(t *testing.T) {
		p := parcel(3001, 1)
		p.ShipTo.PostalCode = "99999"
		_, err := c.CreateLabel(ctx(t), p)
		var rejected *client.RejectedError
		require.ErrorAs(t, err, &rejected)
		require.ErrorIs(t, err, client.ErrRejected)
		require.Equal(t, "address_invalid", rejected.CarrierCode)
		require.NotEmpty(t, rejected.CarrierMessage)
		require.Equal(t, client.DeriveKey(p), rejected.Key)
		require.False(t, client.IsTemporary(err))
		require.Equal(t, 1, postsWithKey(s, p))
		require.Zero(t, s.Purchases(p.OrderID, p.ParcelNo))
	})

	t.Run("saved carrier_unavailable, then a new key", func(t *testing.T) {
		opts := s.Sim.Options()
		opts.FailRate = 1
		require.NoError(t, s.Sim.SetOptions(opts))
		p := parcel(3002, 1)
		_, err := c.CreateLabel(ctx(t), p)
		var unavailable *client.UnavailableError
		require.ErrorAs(t, err, &unavailable)
		require.True(t, unavailable.Final, "%v", err)
		require.Equal(t, client.CodeCarrierUnavailable, unavailable.Problem.Code)
		require.False(t, client.IsTemporary(err))
		require.Equal(t, 1, postsWithKey(s, p), "a saved 502 is final, not a transient 5xx")

		// The same key answers the same, replayed.
		_, err = c.CreateLabel(ctx(t), p)
		require.ErrorAs(t, err, &unavailable)
		require.True(t, unavailable.Final)
		require.Equal(t, 2, postsWithKey(s, p))

		// A new key is a new intent, allowed because the old one failed for good.
		opts.FailRate = 0
		require.NoError(t, s.Sim.SetOptions(opts))
		got, err := c.CreateLabel(ctx(t), p, client.WithKey(client.DeriveKey(p)+":2"))
		require.NoError(t, err)
		require.Equal(t, p.OrderID, got.OrderID)
		require.Equal(t, 1, s.Purchases(p.OrderID, p.ParcelNo))
	})

	t.Run("key reused, parcel already labelled", func(t *testing.T) {
		p := parcel(3003, 1)
		first, err := c.CreateLabel(ctx(t), p)
		require.NoError(t, err)

		heavier := p
		heavier.WeightG = 2000
		_, err = c.CreateLabel(ctx(t), heavier)
		require.ErrorIs(t, err, client.ErrKeyReused)
		var pe *client.ProblemError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, http.StatusUnprocessableEntity, pe.Problem.Status)
		require.False(t, client.IsTemporary(err))
		require.Equal(t, 2, postsWithKey(s, p), "one POST for the label, one for the reuse")

		_, err = c.CreateLabel(ctx(t), heavier, client.WithKey("another-key"))
		require.ErrorIs(t, err, client.ErrParcelAlreadyLabelled)
		require.ErrorAs(t, err, &pe)
		require.NotEmpty(t, pe.RequestID, "the 409 names the existing label request")
		require.Equal(t, 1, postsWith(s, "another-key"))

		// A reprint is a new version and a new key.
		reprint := p
		reprint.LabelVersion = 2
		second, err := c.CreateLabel(ctx(t), reprint)
		require.NoError(t, err)
		require.NotEqual(t, first.LabelID, second.LabelID)
		require.Equal(t, 2, s.Purchases(p.OrderID, p.ParcelNo))
	})

	t.Run("request errors", func(t *testing.T) {
		bad := parcel(3004, 1)
		bad.Service = "teleport"
		_, err := c.CreateLabel(ctx(t), bad)
		require.ErrorIs(t, err, client.ErrInvalidRequest)
		require.Equal(t, 1, postsWithKey(s, bad))

		stranger := newClient(s, "lk_unknown")
		p := parcel(3005, 1)
		_, err = stranger.CreateLabel(ctx(t), p)
		require.ErrorIs(t, err, client.ErrUnauthenticated)
		require.Equal(t, 1, postsWithKey(s, p))

		before := len(s.Faults.Seen())
		_, err = c.CreateLabel(ctx(t), p, client.WithKey("has space"))
		require.ErrorIs(t, err, client.ErrInvalidKey)
		require.Len(t, s.Faults.Seen(), before, "nothing is sent with a key the API would refuse")
	})
}

// Retrying is bounded: an API that keeps failing gets MaxAttempts attempts,
// then the caller learns the outcome is unknown and may ask again later with
// the same key; an accepted request not final in time is reported pending.
func TestBounds(t *testing.T) {
	t.Parallel()

	t.Run("attempts", func(t *testing.T) {
		t.Parallel()
		s := stacktest.NewSim(t, stacktest.SimOpts{})
		tok := s.Token("fulfilment")
		s.Faults.Script(func(int, *http.Request) stacktest.Fault { return stacktest.Fault503 })
		c := newClient(s, tok, client.WithMaxAttempts(4))
		p := parcel(4001, 1)
		_, err := c.CreateLabel(ctx(t), p)
		var unavailable *client.UnavailableError
		require.ErrorAs(t, err, &unavailable)
		require.False(t, unavailable.Final)
		require.Equal(t, 4, unavailable.Attempts)
		require.Equal(t, client.CodeStoreUnavailable, unavailable.Problem.Code)
		require.True(t, client.IsTemporary(err))
		require.Equal(t, 4, postsWithKey(s, p))

		// Later, the same parcel: the same key, one label.
		s.Faults.Script(nil)
		got, err := c.CreateLabel(ctx(t), p)
		require.NoError(t, err)
		requireOneLabel(t, s, c, p, got)
	})

	t.Run("pending", func(t *testing.T) {
		t.Parallel()
		s := stacktest.NewSim(t, stacktest.SimOpts{NoWorker: true})
		tok := s.Token("fulfilment")
		c := newClient(s, tok, client.WithWait(0), client.WithMaxWait(100*time.Millisecond))
		p := parcel(4002, 1)
		_, err := c.CreateLabel(ctx(t), p)
		var pending *client.PendingError
		require.ErrorAs(t, err, &pending)
		require.NotEmpty(t, pending.RequestID)
		require.True(t, client.IsTemporary(err))
		require.Equal(t, 1, postsWithKey(s, p))
		require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents`))

		// The caller's deadline ends the wait too; asking again is still right.
		short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = newClient(s, tok, client.WithWait(0)).CreateLabel(short, p)
		require.Error(t, err)
		require.True(t, client.IsTemporary(err), "%v", err)
		require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents`))
	})
}

// requireNotFound checks that err is the API's 404 and returns its problem.
func requireNotFound(t *testing.T, err error) *client.ProblemError {
	t.Helper()
	require.ErrorIs(t, err, client.ErrNotFound)
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, http.StatusNotFound, pe.Problem.Status)
	return pe
}

// fetchAtCarrier fetches a label's document where the carrier serves it
// (the simulator of these stacks wants no token) and returns the answer's
// headers and bytes, requiring a 200.
func fetchAtCarrier(t *testing.T, doc *client.Document) (http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(doc.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return resp.Header, body
}
