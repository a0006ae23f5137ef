package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests put the client in front of scripted answers; e2e/sdk, in the
// service's module, runs it against the real API. Sleeps are recorded instead
// of slept, and the jitter draws its ceiling, so delays are checked exactly
// and nothing waits.

type recorder struct {
	mu       sync.Mutex
	sleeps   []time.Duration
	requests []*http.Request
	bodies   []string
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sleeps = append(r.sleeps, d)
	return ctx.Err()
}

func (r *recorder) Sleeps() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.sleeps...)
}

func (r *recorder) Requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.requests...)
}

// script serves answer(n, r) for the n-th request (from 1), recording each.
func script(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request), opts ...Option) (*Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.requests = append(rec.requests, r)
		rec.bodies = append(rec.bodies, string(b))
		n := len(rec.requests)
		rec.mu.Unlock()
		answer(n, w, r)
	}))
	t.Cleanup(srv.Close)
	c := New(srv.URL, "lk_test", opts...)
	c.sleepFunc = rec.sleep
	c.jitterFunc = func(limit time.Duration) time.Duration { return limit }
	return c, rec
}

// inTurn answers the n-th request with answers[n-1], and every request after
// the last answer with the last one again.
func inTurn(answers ...func(w http.ResponseWriter)) func(n int, w http.ResponseWriter, r *http.Request) {
	return func(n int, w http.ResponseWriter, _ *http.Request) {
		answers[min(n, len(answers))-1](w)
	}
}

var testParcel = Parcel{OrderID: 918273, ParcelNo: 1, WeightG: 1450, Service: "ground", ShipTo: Address{
	Name: "A. Example", Line1: "1 Example Street", City: "Exampleton", PostalCode: "10115", Country: "DE",
}}

var testLabel = Label{LabelID: "lbl_1", OrderID: 918273, ParcelNo: 1, LabelVersion: 1, Service: "ground",
	TrackingNo: "GRD000918273", CarrierLabelID: "CL-1", CostCents: 595, Currency: "USD",
	CreatedAt: time.Date(2026, 12, 2, 10, 0, 1, 0, time.UTC)}

func writeLabel(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(testLabel)
}

func writeProblem(w http.ResponseWriter, status int, code string, headers ...string) {
	p := newProblem(code, "detail of "+code)
	p.Status = status
	if code == CodeCarrierRejected {
		p.CarrierCode, p.CarrierMessage = "address_invalid", "no such postal code"
	}
	for i := 0; i+1 < len(headers); i += 2 {
		w.Header().Set(headers[i], headers[i+1])
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// newProblem is a problem document as the API writes it.
func newProblem(code, detail string) Problem {
	return Problem{Type: "https://labelkit.dev/problems/" + code, Title: "Title of " + code, Code: code, Detail: detail}
}

func hangUp(w http.ResponseWriter) {
	conn, _, _ := w.(http.Hijacker).Hijack()
	_ = conn.Close()
}

// Which first answers are retried with the same key, and what the final ones
// are returned as.
func TestClassification(t *testing.T) {
	t.Parallel()
	type check func(t *testing.T, err error)
	is := func(target error) check {
		return func(t *testing.T, err error) { require.ErrorIs(t, err, target) }
	}
	cases := map[string]struct {
		first func(w http.ResponseWriter)
		retry bool
		check check
	}{
		"lost reply": {first: hangUp, retry: true},
		"cut reply": {first: func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "500")
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"label_id"`))
		}, retry: true},
		"503 store":    {first: func(w http.ResponseWriter) { writeProblem(w, 503, CodeStoreUnavailable, "Retry-After", "1") }, retry: true},
		"500 internal": {first: func(w http.ResponseWriter) { writeProblem(w, 500, CodeInternal) }, retry: true},
		"502 gateway":  {first: func(w http.ResponseWriter) { http.Error(w, "<html>bad gateway</html>", 502) }, retry: true},
		"504 gateway":  {first: func(w http.ResponseWriter) { http.Error(w, "timeout", 504) }, retry: true},
		"429":          {first: func(w http.ResponseWriter) { http.Error(w, "slow down", 429) }, retry: true},
		"408":          {first: func(w http.ResponseWriter) { http.Error(w, "too slow", 408) }, retry: true},
		"409 in progress": {first: func(w http.ResponseWriter) {
			writeProblem(w, 409, CodeRequestInProgress, "Retry-After", "1")
		}, retry: true},
		"409 parcel already labelled": {first: func(w http.ResponseWriter) {
			writeProblem(w, 409, CodeParcelAlreadyLabelled, "Location", "/v1/label-requests/lr_OTHER")
		}, check: func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrParcelAlreadyLabelled)
			var pe *ProblemError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "lr_OTHER", pe.RequestID)
		}},
		"saved 502 carrier_unavailable": {first: func(w http.ResponseWriter) {
			writeProblem(w, 502, CodeCarrierUnavailable, "Idempotent-Replayed", "true")
		}, check: func(t *testing.T, err error) {
			var u *UnavailableError
			require.ErrorAs(t, err, &u)
			require.True(t, u.Final)
			require.Equal(t, 1, u.Attempts)
			require.ErrorIs(t, err, ErrUnavailable)
		}},
		"502 carrier_unavailable after Prefer: wait": {first: func(w http.ResponseWriter) {
			writeProblem(w, 502, CodeCarrierUnavailable) // final, though not replayed
		}, check: func(t *testing.T, err error) {
			var u *UnavailableError
			require.ErrorAs(t, err, &u)
			require.True(t, u.Final)
		}},
		"422 carrier_rejected": {first: func(w http.ResponseWriter) {
			writeProblem(w, 422, CodeCarrierRejected, "Idempotent-Replayed", "true")
		}, check: func(t *testing.T, err error) {
			var r *RejectedError
			require.ErrorAs(t, err, &r)
			require.Equal(t, "address_invalid", r.CarrierCode)
			require.Equal(t, "no such postal code", r.CarrierMessage)
			require.Equal(t, "label:918273:1:v1", r.Key)
			require.ErrorIs(t, err, ErrRejected)
		}},
		"422 key reused": {first: func(w http.ResponseWriter) { writeProblem(w, 422, CodeIdempotencyKeyReused) }, check: is(ErrKeyReused)},
		"400 invalid":    {first: func(w http.ResponseWriter) { writeProblem(w, 400, CodeInvalidRequest) }, check: is(ErrInvalidRequest)},
		"400 key":        {first: func(w http.ResponseWriter) { writeProblem(w, 400, CodeIdempotencyKeyInvalid) }, check: is(ErrInvalidRequest)},
		"413":            {first: func(w http.ResponseWriter) { writeProblem(w, 413, CodePayloadTooLarge) }, check: is(ErrInvalidRequest)},
		"401":            {first: func(w http.ResponseWriter) { writeProblem(w, 401, CodeUnauthenticated) }, check: is(ErrUnauthenticated)},
		"404":            {first: func(w http.ResponseWriter) { writeProblem(w, 404, CodeNotFound) }, check: is(ErrNotFound)},
		"redirect": {first: func(w http.ResponseWriter) {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusFound)
		}, check: func(t *testing.T, err error) { require.ErrorContains(t, err, "unexpected answer 302") }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, rec := script(t, inTurn(tc.first, writeLabel))
			l, err := c.CreateLabel(context.Background(), testParcel)
			reqs := rec.Requests()
			if tc.retry {
				require.NoError(t, err)
				require.Equal(t, testLabel, *l)
				require.Len(t, reqs, 2)
				require.Equal(t, reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key"))
				require.Equal(t, rec.bodies[0], rec.bodies[1])
				return
			}
			require.Nil(t, l)
			require.Len(t, reqs, 1, "a final answer is not retried")
			require.False(t, IsTemporary(err))
			tc.check(t, err)
		})
	}
}

// The key is derived from the parcel, sent in the draft's quoted form, the
// same on every attempt; a key of the caller's own replaces it.
func TestKey(t *testing.T) {
	t.Parallel()
	c, rec := script(t, inTurn(hangUp, hangUp, hangUp, writeLabel))
	_, err := c.CreateLabel(context.Background(), testParcel)
	require.NoError(t, err)
	for _, r := range rec.Requests() {
		require.Equal(t, `"label:918273:1:v1"`, r.Header.Get("Idempotency-Key"))
		require.Equal(t, "Bearer lk_test", r.Header.Get("Authorization"))
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	}
	var sent map[string]any
	require.NoError(t, json.Unmarshal([]byte(rec.bodies[0]), &sent))
	require.EqualValues(t, 1, sent["label_version"], "a zero label_version is sent as the default")

	_, err = c.CreateLabel(context.Background(), testParcel, WithKey(`own"key\x`))
	require.NoError(t, err)
	reqs := rec.Requests()
	require.Equal(t, `"own\"key\\x"`, reqs[len(reqs)-1].Header.Get("Idempotency-Key"))

	before := len(rec.Requests())
	for _, bad := range []string{"has space", "ключ", strings.Repeat("k", 256), "tab\t"} {
		_, err := c.CreateLabel(context.Background(), testParcel, WithKey(bad))
		require.ErrorIs(t, err, ErrInvalidKey, bad)
	}
	require.Len(t, rec.Requests(), before, "an invalid key is never sent")

	require.Equal(t, "label:918273:1:v1", DeriveKey(testParcel))
	v3 := testParcel
	v3.LabelVersion = 3
	require.Equal(t, "label:918273:1:v3", DeriveKey(v3))
}

// Full jitter over an exponential ceiling: with the jitter drawing its
// ceiling the delays are exactly base·2ⁿ⁻¹ up to max; the real draw stays
// within [0, ceiling].
func TestBackoff(t *testing.T) {
	t.Parallel()
	c, rec := script(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeProblem(w, 503, CodeStoreUnavailable)
	}, WithBackoff(100*time.Millisecond, time.Second), WithMaxAttempts(7))
	_, err := c.CreateLabel(context.Background(), testParcel)
	var u *UnavailableError
	require.ErrorAs(t, err, &u)
	require.False(t, u.Final)
	require.Equal(t, 7, u.Attempts)
	require.Equal(t, CodeStoreUnavailable, u.Problem.Code)
	require.True(t, IsTemporary(err))
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}, rec.Sleeps())

	for range 1000 {
		d := jitter(300 * ms)
		require.Between(t, d, 0, 300*ms)
	}
	require.Zero(t, jitter(0))
	huge := New("http://x", "t", WithBackoff(time.Second, time.Minute))
	huge.jitterFunc = func(limit time.Duration) time.Duration { return limit }
	require.Equal(t, time.Minute, huge.backoff(200), "no overflow on a long run of retries")
}

// A Retry-After longer than the backoff is honoured; one that would end past
// the time budget or the caller's deadline ends the retries at once.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	t.Run("honoured", func(t *testing.T) {
		t.Parallel()
		c, rec := script(t, inTurn(
			func(w http.ResponseWriter) { writeProblem(w, 503, CodeStoreUnavailable, "Retry-After", "3") },
			func(w http.ResponseWriter) {
				w.Header().Set("Retry-After", "2")
				http.Error(w, "slow down", 429)
			},
			writeLabel,
		), WithBackoff(10*time.Millisecond, 100*time.Millisecond))
		_, err := c.CreateLabel(context.Background(), testParcel)
		require.NoError(t, err)
		require.Equal(t, []time.Duration{3 * time.Second, 2 * time.Second}, rec.Sleeps())
	})
	t.Run("beyond the budget", func(t *testing.T) {
		t.Parallel()
		c, rec := script(t, func(n int, w http.ResponseWriter, r *http.Request) {
			writeProblem(w, 503, CodeStoreUnavailable, "Retry-After", "120")
		})
		_, err := c.CreateLabel(context.Background(), testParcel)
		var u *UnavailableError
		require.ErrorAs(t, err, &u)
		require.Equal(t, 1, u.Attempts)
		require.Empty(t, rec.Sleeps())
	})
	t.Run("beyond the deadline", func(t *testing.T) {
		t.Parallel()
		c, rec := script(t, func(n int, w http.ResponseWriter, r *http.Request) {
			writeProblem(w, 503, CodeStoreUnavailable, "Retry-After", "30")
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.CreateLabel(ctx, testParcel)
		require.ErrorIs(t, err, ErrUnavailable)
		require.True(t, IsTemporary(err))
		require.Empty(t, rec.Sleeps())
	})
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"5":                             5 * time.Second,
		" 1 ":                           time.Second,
		"0":                             0,
		"-3":                            0,
		"soon":                          0,
		"Wed, 02 Dec 2026 10:00:07 GMT": 7 * time.Second,
		"Wed, 02 Dec 2026 09:00:00 GMT": 0,
	} {
		require.Equal(t, want, parseRetryAfter(v, now), v)
	}
}

// Each POST asks to wait for the outcome, no longer than the API allows nor
// than the caller's deadline leaves room for.
func TestPreferWait(t *testing.T) {
	t.Parallel()
	cases := []struct {
		opts     []Option
		deadline time.Duration
		want     string
	}{
		{want: "wait=10"},
		{opts: []Option{WithWait(0)}, want: ""},
		{opts: []Option{WithWait(45 * time.Second)}, want: "wait=30"},
		{opts: []Option{WithWait(2500 * time.Millisecond)}, want: "wait=2"},
		{deadline: 3999 * time.Millisecond, want: "wait=2"}, // holds while the call starts within 999 ms
		{deadline: 1500 * time.Millisecond, want: ""},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.want, tc.deadline), func(t *testing.T) {
			t.Parallel()
			c, rec := script(t, func(n int, w http.ResponseWriter, r *http.Request) { writeLabel(w) }, tc.opts...)
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			_, err := c.CreateLabel(ctx, testParcel)
			require.NoError(t, err)
			require.Equal(t, tc.want, rec.Requests()[0].Header.Get("Prefer"))
		})
	}
}

func writePending(w http.ResponseWriter, status int, retryAfter string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/label-requests/lr_1 x")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(LabelRequest{ID: "lr_1 x", IdempotencyKey: "label:918273:1:v1", Status: StatusPending})
}

// pending1s is a 202 asking to poll again after a second.
func pending1s(w http.ResponseWriter) { writePending(w, 202, "1") }

func writeFinal(w http.ResponseWriter, lr LabelRequest) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(lr)
}

// After a 202 the client polls the label request, no sooner than its
// Retry-After, riding out transient failures, until it is final.
func TestPolling(t *testing.T) {
	t.Parallel()
	t.Run("succeeded", func(t *testing.T) {
		t.Parallel()
		c, rec := script(t, inTurn(
			func(w http.ResponseWriter) { writePending(w, 202, "2") },
			func(w http.ResponseWriter) { writeProblem(w, 500, CodeInternal) },
			func(w http.ResponseWriter) { writeProblem(w, 503, CodeStoreUnavailable) },
			func(w http.ResponseWriter) { writePending(w, 200, "1") },
			func(w http.ResponseWriter) {
				b, _ := json.Marshal(testLabel)
				writeFinal(w, LabelRequest{ID: "lr_1 x", Status: StatusSucceeded, Label: b})
			},
		), WithBackoff(10*time.Millisecond, time.Second), WithPollInterval(500*time.Millisecond))
		l, err := c.CreateLabel(context.Background(), testParcel)
		require.NoError(t, err)
		require.Equal(t, testLabel, *l)
		reqs := rec.Requests()
		require.Len(t, reqs, 5)
		require.Equal(t, http.MethodPost, reqs[0].Method)
		for _, r := range reqs[1:] {
			require.Equal(t, http.MethodGet, r.Method)
			require.Equal(t, "/v1/label-requests/lr_1%20x", r.URL.EscapedPath())
		}
		ms := time.Millisecond
		// Retry-After of the 202; backoff after two failures, reset by the
		// pending answer; then its Retry-After, longer than the poll interval.
		require.Equal(t, []time.Duration{2 * time.Second, 10 * ms, 20 * ms, time.Second}, rec.Sleeps())
	})
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		c, _ := script(t, inTurn(pending1s, func(w http.ResponseWriter) {
			p := newProblem(CodeCarrierRejected, "rejected")
			p.Status, p.CarrierCode = 422, "address_invalid"
			b, _ := json.Marshal(p)
			writeFinal(w, LabelRequest{ID: "lr_1 x", Status: StatusFailed, Error: b})
		}))
		_, err := c.CreateLabel(context.Background(), testParcel)
		var r *RejectedError
		require.ErrorAs(t, err, &r)
		require.Equal(t, "lr_1 x", r.RequestID)
		require.Equal(t, "address_invalid", r.CarrierCode)
	})
	t.Run("gone", func(t *testing.T) {
		t.Parallel()
		c, _ := script(t, inTurn(pending1s, func(w http.ResponseWriter) { writeProblem(w, 404, CodeNotFound) }))
		_, err := c.CreateLabel(context.Background(), testParcel)
		require.ErrorIs(t, err, ErrNotFound)
		require.False(t, IsTemporary(err))
	})
	t.Run("no time left to wait", func(t *testing.T) {
		t.Parallel()
		c, rec := script(t, inTurn(pending1s), WithMaxWait(0))
		_, err := c.CreateLabel(context.Background(), testParcel)
		var p *PendingError
		require.ErrorAs(t, err, &p)
		require.Equal(t, "lr_1 x", p.RequestID)
		require.True(t, IsTemporary(err))
		require.Len(t, rec.Requests(), 1)
	})
}

// The caller's context ends retries and waiting; the outcome is then
// unknown, which is temporary.
func TestContextEnds(t *testing.T) {
	t.Parallel()
	c, _ := script(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeProblem(w, 503, CodeStoreUnavailable)
	})
	ctx, cancel := context.WithCancel(context.Background())
	c.sleepFunc = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	_, err := c.CreateLabel(ctx, testParcel)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, IsTemporary(err))

	c2, _ := script(t, inTurn(pending1s))
	ctx2, cancel2 := context.WithCancel(context.Background())
	c2.sleepFunc = func(context.Context, time.Duration) error { cancel2(); return context.Canceled }
	_, err = c2.CreateLabel(ctx2, testParcel)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrPending)
	require.True(t, IsTemporary(err))
}

func TestIsTemporary(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		nil:                                   false,
		&PendingError{}:                       true,
		&UnavailableError{}:                   true,
		&UnavailableError{Final: true}:        false,
		&RejectedError{}:                      false,
		&ProblemError{}:                       false,
		fmt.Errorf("x: %w", context.Canceled): true,
		context.DeadlineExceeded:              true,
		ErrInvalidKey:                         false,
		errors.New("something else"):          false,
	} {
		require.Equal(t, want, IsTemporary(err), "%v", err)
		if err != nil {
			require.NotEmpty(t, err.Error())
		}
	}
}

// LabelDocument: the document's bytes, type and ETag; If-None-Match sent
// and a 304 read as NotModified; a 502 carrier_unavailable retried after its
// Retry-After; a 404 final; a document over the bound refused, not retried.
func TestLabelDocument(t *testing.T) {
	t.Parallel()
	pdf := []byte("%PDF-1.4 a label\n%%EOF\n")
	serve := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/pdf")
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write(pdf)
	}
	c, rec := script(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			writeProblem(w, 502, CodeCarrierUnavailable, "Retry-After", "2")
			return
		}
		serve(w, r)
	})
	doc, err := c.LabelDocument(context.Background(), "lbl 1", "")
	require.NoError(t, err)
	require.Equal(t, &DocumentFile{ContentType: "application/pdf", ETag: `"v1"`, Data: pdf}, doc)
	require.Equal(t, []time.Duration{2 * time.Second}, rec.Sleeps(), "the carrier's trouble is retried after Retry-After")
	for _, r := range rec.Requests() {
		require.Equal(t, http.MethodGet, r.Method)
		require.Equal(t, "/v1/labels/lbl%201/document", r.URL.EscapedPath())
		require.Equal(t, "Bearer lk_test", r.Header.Get("Authorization"))
		require.Equal(t, "*/*", r.Header.Get("Accept"))
		require.Equal(t, "", r.Header.Get("If-None-Match"))
	}

	same, err := c.LabelDocument(context.Background(), "lbl 1", doc.ETag)
	require.NoError(t, err)
	require.Equal(t, &DocumentFile{ETag: `"v1"`, NotModified: true}, same)
	reqs := rec.Requests()
	require.Equal(t, `"v1"`, reqs[len(reqs)-1].Header.Get("If-None-Match"))

	missing, rec404 := script(t, inTurn(func(w http.ResponseWriter) { writeProblem(w, 404, CodeNotFound) }))
	_, err = missing.LabelDocument(context.Background(), "lbl_x", "")
	require.ErrorIs(t, err, ErrNotFound)
	require.Len(t, rec404.Requests(), 1, "a 404 is final")

	huge, recHuge := script(t, inTurn(func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/pdf")
		_, _ = w.Write(make([]byte, maxDocument+1))
	}))
	_, err = huge.LabelDocument(context.Background(), "lbl_big", "")
	require.ErrorContains(t, err, "over")
	require.Len(t, recHuge.Requests(), 1, "an answer over the bound is not retried")
}
