package httpapi_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// Idempotency-Key-Expires is on every answer that stores or replays the key:
// for a key not yet final, now plus the retention; for a final one, the
// record's own expiry (rounded up to the second, as an IMF-fixdate). Answers
// about another key's intent, or refusing the key, do not carry it.
func TestIdempotencyKeyExpires(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	var slow atomic.Bool
	slow.Store(true)
	s.Carrier.Script = func(int, string) string { // pending until released
		if slow.Load() {
			return "slow"
		}
		return ""
	}
	tok := s.Token("shop")
	body := stacktest.ParcelBody(4242, 1, 900)
	expires := func(r stacktest.Response) time.Time {
		t.Helper()
		v := r.Header.Get("Idempotency-Key-Expires")
		require.NotEmpty(t, v, "status %d", r.Status)
		at, err := http.ParseTime(v)
		require.NoError(t, err)
		require.Equal(t, at.UTC().Format(http.TimeFormat), v, "an IMF-fixdate")
		return at
	}
	within := func(at, from, to time.Time) {
		t.Helper()
		require.False(t, at.Before(from.Truncate(time.Second)) || at.After(to.Add(time.Second)), "%s not in [%s, %s]", at, from, to)
	}

	before := time.Now()
	r := s.Create(tok, "k-1", body)
	require.Equal(t, http.StatusAccepted, r.Status)
	within(expires(r), before.Add(24*time.Hour), time.Now().Add(24*time.Hour))
	id := stacktest.Decode[labels.LabelRequest](t, r.Body).ID

	time.Sleep(1100 * time.Millisecond)
	before = time.Now()
	r = s.Create(tok, "k-1", body) // a replay while pending: when it would expire if it completed now
	require.Equal(t, http.StatusAccepted, r.Status)
	within(expires(r), before.Add(24*time.Hour), time.Now().Add(24*time.Hour))

	require.Equal(t, http.StatusUnprocessableEntity, s.Create(tok, "k-1", stacktest.ParcelBody(4242, 1, 901)).Status)
	require.Empty(t, s.Create(tok, "k-1", stacktest.ParcelBody(4242, 1, 901)).Header.Get("Idempotency-Key-Expires"), "a refused reuse")
	dup := s.Create(tok, "k-other", body)
	require.Equal(t, http.StatusAccepted, dup.Status)
	require.Empty(t, dup.Header.Get("Idempotency-Key-Expires"), "another key's intent: nothing stored under k-other")

	close(s.Carrier.Release)
	s.WaitFinal(tok, id)
	stored := dbtest.Scalar[time.Time](t, s.Pool, `SELECT expires_at FROM idempotency_keys WHERE idem_key = 'k-1'`)
	r = s.Create(tok, "k-1", body)
	require.Equal(t, http.StatusCreated, r.Status)
	want := stored.Truncate(time.Second)
	if !want.Equal(stored) {
		want = want.Add(time.Second)
	}
	require.True(t, want.Equal(expires(r)), "the record's expiry: %s, header %s", stored, r.Header.Get("Idempotency-Key-Expires"))

	// The first request that waits for its outcome gets the record's expiry too.
	slow.Store(false)
	r = s.Create(tok, "k-2", stacktest.ParcelBody(4243, 1, 900), "Prefer", "wait=20")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT expires_at FROM idempotency_keys WHERE idem_key = 'k-2'`).Scan(&stored))
	got := expires(r)
	require.False(t, got.Before(stored) || got.After(stored.Add(time.Second)), "%s vs %s", got, stored)
}
