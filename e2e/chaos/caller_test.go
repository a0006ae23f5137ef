package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// caller is one of the two callers of a run.
type caller struct {
	name, token string
}

// intent is one label a caller wants, and everything its requests learnt.
type intent struct {
	n      int
	caller *caller
	key    string
	parcel parcel
	plan   plan

	mu        sync.Mutex
	accepted  bool
	requestID string
	created   [][]byte // every 201 body answered to a POST of this intent
	outcome   string   // how the first acceptance ended when it did not: "unexpected", "gave up"
	unsent    bool     // dropped before its time: an HA run's steps were over
}

// plan is how an intent's requests are sent, drawn from the seed up front.
type plan struct {
	at         time.Duration // first requests, from the start of the window
	concurrent int           // requests sent at once at first
	later      time.Duration // a repeat this long after the first requests; 0 for none
	after      bool          // a repeat once the outcome is final
	rng        *rand.Rand    // renderings and key forms of this intent's requests
	// gate, when set, sends the first requests at after it closes, instead
	// of after the start of the window.
	gate <-chan struct{}
	// until, when set, drops the intent unsent if it closes first.
	until <-chan struct{}
}

func (in *intent) noteAccepted(requestID string, created []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.accepted = true
	if requestID != "" && in.requestID == "" {
		in.requestID = requestID
	}
	if created != nil {
		in.created = append(in.created, created)
	}
}

// rendering returns a body and key form for one request: variant 0 (plain)
// with the bare key for the first request, a random rendering and form after.
func (in *intent) rendering(first bool) (body []byte, key string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if first {
		return in.parcel.render(0, nil), in.key
	}
	body = in.parcel.render(1, in.plan.rng)
	key = in.key
	if in.plan.rng.IntN(2) == 0 {
		key = `"` + in.key + `"` // the Structured-Field string form names the same key
	}
	return body, key
}

// recorder counts every answer the callers saw, and keeps every 202.
type recorder struct {
	mu            sync.Mutex
	posts         int
	postsInFlight int
	gets          int
	answers       map[int]int
	netErrors     int
	noRetryAfter  int // 503s without Retry-After
	unexpected    []string
	acks          []ack
}

// ack is one 202 a caller got: the intent's key and request id, when its
// request was sent and when the answer came.
type ack struct {
	caller, key, requestID string
	sent, at               time.Time
}

func (r *recorder) ack(a ack) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = append(r.acks, a)
}

// inFlight is the number of POSTs sent that have not been answered yet.
func (r *recorder) inFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.postsInFlight
}

func (r *recorder) sending(method string, delta int) {
	if method != http.MethodPost {
		return
	}
	r.mu.Lock()
	r.postsInFlight += delta
	r.mu.Unlock()
}

func newRecorder() *recorder { return &recorder{answers: map[int]int{}} }

func (r *recorder) record(method string, status int, header http.Header, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if method == http.MethodPost {
		r.posts++
	} else {
		r.gets++
	}
	if err != nil {
		r.netErrors++
		return
	}
	r.answers[status]++
	if status == http.StatusServiceUnavailable && header.Get("Retry-After") == "" {
		r.noRetryAfter++
	}
}

func (r *recorder) unexpectedAnswer(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unexpected = append(r.unexpected, fmt.Sprintf(format, args...))
}

// answer is one HTTP answer, read whole.
type answer struct {
	status   int
	header   http.Header
	body     []byte
	err      error
	sent, at time.Time // when the request was sent, and the answer read
}

// api sends the callers' requests.
type api struct {
	http *http.Client
	url  func() string
	rec  *recorder
}

// attemptTimeout bounds one request; Prefer: wait asks for less.
const attemptTimeout = 15 * time.Second

func (a *api) do(ctx context.Context, method, path, token string, body []byte, header ...string) answer {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.url()+path, rd)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	a.rec.sending(method, 1)
	defer a.rec.sending(method, -1)
	sent := time.Now()
	resp, err := a.http.Do(req)
	if err != nil {
		a.rec.record(method, 0, nil, err)
		return answer{err: err, sent: sent}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.rec.record(method, 0, nil, err)
		return answer{err: err, sent: sent}
	}
	a.rec.record(method, resp.StatusCode, resp.Header, nil)
	return answer{status: resp.StatusCode, header: resp.Header, body: b, sent: sent, at: time.Now()}
}

// transient reports an answer after which a caller retries with the same key:
// no answer at all, 503, 409 request_in_progress, 429.
func transient(a answer) bool {
	if a.err != nil {
		return true
	}
	switch a.status {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		return true
	case http.StatusConflict:
		return problemCode(a.body) == "request_in_progress"
	}
	return false
}

func problemCode(b []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Code
}

// pause waits before retry n: exponential from 50 ms to 1 s with full
// jitter, and at least the answer's Retry-After (at most 2 s of it).
func pause(ctx context.Context, rng *rand.Rand, n int, a answer) error {
	d := time.Duration(rng.Int64N(int64(min(time.Second, 50*time.Millisecond<<min(n, 5))))) + 10*time.Millisecond
	if a.header != nil {
		if s, err := strconv.Atoi(a.header.Get("Retry-After")); err == nil && s > 0 {
			d = max(d, min(time.Duration(s)*time.Second, 2*time.Second))
		}
	}
	if !sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// sleep waits for d; it returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// sendBound is how long one request of an intent is retried before the
// caller gives up on it.
const sendBound = 3 * time.Minute

// post sends one request of the intent, retrying transient failures with the
// same key and body, until an answer is final: 202 or 201 (accepted), or
// anything else (unexpected: the bodies are valid and the keys fresh).
func (a *api) post(ctx context.Context, in *intent, first bool, wait bool) {
	body, key := in.rendering(first)
	header := []string{"Idempotency-Key", key}
	if wait {
		header = append(header, "Prefer", "wait=3")
	}
	in.mu.Lock()
	rng := rand.New(rand.NewPCG(uint64(in.n), in.plan.rng.Uint64()))
	in.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, sendBound)
	defer cancel()
	for n := 0; ; n++ {
		ans := a.do(ctx, http.MethodPost, "/v1/labels", in.caller.token, body, header...)
		switch {
		case ans.err == nil && ans.status == http.StatusAccepted:
			var lr struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(ans.body, &lr); err != nil || lr.ID == "" {
				a.rec.unexpectedAnswer("intent %d: 202 without a label request id: %s", in.n, ans.body)
			}
			a.rec.ack(ack{caller: in.caller.name, key: in.key, requestID: lr.ID, sent: ans.sent, at: ans.at})
			in.noteAccepted(lr.ID, nil)
			return
		case ans.err == nil && ans.status == http.StatusCreated:
			in.noteAccepted("", ans.body)
			return
		case transient(ans):
		default:
			a.rec.unexpectedAnswer("intent %d (caller %s, key %s): POST answered %d: %s", in.n, in.caller.name, key, ans.status, ans.body)
			in.mu.Lock()
			in.outcome = "unexpected"
			in.mu.Unlock()
			return
		}
		if pause(ctx, rng, n, ans) != nil {
			in.mu.Lock()
			if !in.accepted && in.outcome == "" {
				in.outcome = "gave up"
			}
			in.mu.Unlock()
			return
		}
	}
}

// labelRequest is what GET /v1/label-requests answers.
type labelRequest struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Status         string          `json:"status"`
	Label          json.RawMessage `json:"label"`
	Error          json.RawMessage `json:"error"`
}

// get reads path until it answers other than transiently; ok is false when
// ctx ended first, or sendBound passed.
func (a *api) get(ctx context.Context, rng *rand.Rand, path, token string) (answer, bool) {
	ctx, cancel := context.WithTimeout(ctx, sendBound)
	defer cancel()
	for n := 0; ; n++ {
		ans := a.do(ctx, http.MethodGet, path, token, nil)
		if !transient(ans) {
			return ans, true
		}
		if pause(ctx, rng, n, ans) != nil {
			return ans, false
		}
	}
}

// awaitFinal polls the intent's label request, as a caller following the
// 202's Location does, until its outcome is final.
func (a *api) awaitFinal(ctx context.Context, in *intent) bool {
	in.mu.Lock()
	id := in.requestID
	rng := rand.New(rand.NewPCG(uint64(in.n), 7))
	in.mu.Unlock()
	path := "/v1/label-requests/" + id
	if id == "" {
		path = "/v1/label-requests?" + url.Values{"idempotency_key": {in.key}}.Encode()
	}
	for {
		ans, ok := a.get(ctx, rng, path, in.caller.token)
		if !ok {
			return false
		}
		if ans.status != http.StatusOK {
			a.rec.unexpectedAnswer("intent %d: GET %s answered %d: %s", in.n, path, ans.status, ans.body)
			return false
		}
		var lr labelRequest
		if err := json.Unmarshal(ans.body, &lr); err != nil {
			a.rec.unexpectedAnswer("intent %d: GET %s: %v", in.n, path, err)
			return false
		}
		if lr.Status != "pending" {
			return true
		}
		if !sleep(ctx, time.Second+time.Duration(rng.Int64N(int64(300*time.Millisecond)))) {
			return false
		}
	}
}

// runIntent sends the intent's requests as its plan says. accepted is told
// once the first requests have ended (accepted or not).
func (a *api) runIntent(ctx context.Context, in *intent, start time.Time, accepted *sync.WaitGroup, repeats *sync.WaitGroup) {
	defer accepted.Done()
	if in.plan.gate != nil {
		select {
		case <-in.plan.gate:
			start = time.Now()
		case <-ctx.Done():
			return
		}
	}
	select {
	case <-time.After(time.Until(start.Add(in.plan.at))):
	case <-in.plan.until:
		in.mu.Lock()
		in.unsent = true
		in.mu.Unlock()
		return
	case <-ctx.Done():
		return
	}
	in.mu.Lock()
	waits := make([]bool, in.plan.concurrent)
	for i := range waits {
		waits[i] = in.plan.rng.IntN(10) < 3
	}
	in.mu.Unlock()
	var wg sync.WaitGroup
	for i, wait := range waits {
		wg.Go(func() { a.post(ctx, in, i == 0, wait) })
	}
	if in.plan.later > 0 {
		repeats.Go(func() {
			if sleep(ctx, in.plan.later) {
				a.post(ctx, in, false, false)
			}
		})
	}
	wg.Wait()
	in.mu.Lock()
	ok := in.accepted
	in.mu.Unlock()
	if ok && in.plan.after {
		repeats.Go(func() {
			if a.awaitFinal(ctx, in) {
				a.post(ctx, in, false, false)
			}
		})
	}
}
