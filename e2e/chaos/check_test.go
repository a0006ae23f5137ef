package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// drain waits until every accepted intent is final, and measures how long
// that took after the window.
func (r *run) drain(ctx context.Context, windowEnd time.Time) {
	r.say("draining: waiting for every accepted intent to become final (at most %s)", r.cfg.DrainTimeout)
	if pending, ok := r.waitNonePending(ctx, "intents", `SELECT count(*) FROM label_intents WHERE status = 'pending'`); !ok {
		r.fig.violate("%d accepted intents still pending %s after the window", pending, r.cfg.DrainTimeout)
		r.fig.Drain = time.Since(windowEnd)
		r.waitRepeats(ctx)
		return
	}
	var last *time.Time
	if err := r.pool.QueryRow(ctx, `SELECT max(completed_at) FROM label_intents`).Scan(&last); err == nil && last != nil {
		r.fig.Drain = max(0, last.Sub(windowEnd))
	}
	r.say("drained %.1fs after the window", r.fig.Drain.Seconds())
	r.waitRepeats(ctx)
}

// waitNonePending reads count, how many rows are still pending, every 250 ms
// until it says none (ok) or DrainTimeout has passed (not ok, with the count
// read last); every 10 s it says how many of what are pending.
func (r *run) waitNonePending(ctx context.Context, what, count string) (int, bool) {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DrainTimeout)
	defer cancel()
	lastSaid := time.Now()
	for {
		var pending int
		err := r.pool.QueryRow(dctx, count).Scan(&pending)
		if err == nil && pending == 0 {
			return 0, true
		}
		if time.Since(lastSaid) >= 10*time.Second {
			r.say("%d %s pending (%v)", pending, what, err)
			lastSaid = time.Now()
		}
		if !sleep(dctx, 250*time.Millisecond) {
			return pending, false
		}
	}
}

// waitRepeats waits for the repeats still under way (repeats after
// completion follow the drain by a poll interval).
func (r *run) waitRepeats(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		r.repeats.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(sendBound):
		r.fig.violate("repeats still under way %s after the drain", sendBound)
	case <-ctx.Done():
	}
}

// verify checks what must hold once the fleet has drained.
func (r *run) verify(ctx context.Context) {
	r.say("checking: outcomes, byte-identical replays, carrier purchases, answers")
	f := r.fig
	for _, q := range []struct {
		dst *int
		sql string
	}{
		{&f.DBIntents, `SELECT count(*) FROM label_intents`},
		{&f.Succeeded, `SELECT count(*) FROM label_intents WHERE status = 'succeeded'`},
		{&f.Failed, `SELECT count(*) FROM label_intents WHERE status = 'failed'`},
		{&f.Pending, `SELECT count(*) FROM label_intents WHERE status = 'pending'`},
		{&f.Labels, `SELECT count(*) FROM labels`},
	} {
		if err := r.pool.QueryRow(ctx, q.sql).Scan(q.dst); err != nil {
			f.violate("reading the database: %v", err)
		}
	}

	// Each intent, as its caller sees it, and two more replays of it.
	type seen struct {
		requestID      string
		carrierLabelID string
	}
	results := make([]seen, len(r.intents))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, in := range r.intents {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i].requestID, results[i].carrierLabelID = r.verifyIntent(ctx, in)
		})
	}
	wg.Wait()

	// What the carrier sold: one label per intent, the one we recorded.
	var purchases []struct {
		CarrierLabelID string `json:"carrier_label_id"`
		IdempotencyKey string `json:"idempotency_key"`
		Reference      string `json:"reference"`
	}
	if err := r.carrierGet(ctx, "/sim/purchases", &purchases); err != nil {
		f.violate("reading the simulator's purchases: %v", err)
	}
	var stats struct {
		Calls      int64 `json:"calls"`
		Replays    int64 `json:"replays"`
		InProgress int64 `json:"in_progress"`
		Failed     int64 `json:"failed"`
		Dropped    int64 `json:"dropped"`
		TimedOut   int64 `json:"timed_out"`
	}
	if err := r.carrierGet(ctx, "/sim/stats", &stats); err != nil {
		f.violate("reading the simulator's stats: %v", err)
	}
	f.CarrierCalls, f.Carrier503, f.CarrierDropped, f.CarrierTimedOut = stats.Calls, stats.Failed, stats.Dropped, stats.TimedOut
	f.CarrierReplays, f.CarrierInProgress = stats.Replays, stats.InProgress
	f.CarrierPurchases = len(purchases)
	msgs := r.fleet.countMessages(msgTakeover, msgFenced)
	f.LeaseTakeovers, f.FencedAttempts = msgs[msgTakeover], msgs[msgFenced]
	byRef := map[string][]string{}
	byKey := map[string]int{}
	for _, p := range purchases {
		byRef[p.Reference] = append(byRef[p.Reference], p.CarrierLabelID)
		byKey[p.IdempotencyKey]++
	}
	ours := map[string]bool{}
	f.MinPurchasesPerIntent = -1
	for i, s := range results {
		if s.requestID == "" {
			continue
		}
		ours[s.requestID] = true
		n := len(byRef[s.requestID])
		f.MaxPurchasesPerIntent = max(f.MaxPurchasesPerIntent, n)
		if f.MinPurchasesPerIntent < 0 || n < f.MinPurchasesPerIntent {
			f.MinPurchasesPerIntent = n
		}
		switch {
		case n != 1:
			f.IntentsNotBoughtOnce++
			f.violate("intent %d (%s): the carrier sold %d labels for it: %v", i, s.requestID, n, byRef[s.requestID])
		case s.carrierLabelID != "" && byRef[s.requestID][0] != s.carrierLabelID:
			f.violate("intent %d (%s): our label is %s, the carrier sold %s", i, s.requestID, s.carrierLabelID, byRef[s.requestID][0])
		}
	}
	if f.MinPurchasesPerIntent < 0 {
		f.MinPurchasesPerIntent = 0
	}
	for ref, ids := range byRef {
		if !ours[ref] {
			f.violate("the carrier sold %v under reference %q, which is no intent of this run", ids, ref)
		}
	}
	for key, n := range byKey {
		if n != 1 {
			f.violate("the carrier sold %d labels under its key %s", n, key)
		}
	}
	if f.CarrierPurchases != f.Intents {
		f.violate("the carrier sold %d labels for %d intents", f.CarrierPurchases, f.Intents)
	}
	if f.DBIntents != f.Intents {
		f.violate("the database holds %d intents for %d sent", f.DBIntents, f.Intents)
	}
	if f.Labels != f.Intents {
		f.violate("the database holds %d labels for %d intents", f.Labels, f.Intents)
	}

	// Every answer the callers saw.
	r.rec.mu.Lock()
	f.Posts, f.Gets, f.NetworkErrors = r.rec.posts, r.rec.gets, r.rec.netErrors
	for s, n := range r.rec.answers {
		f.Answers[s] = n
		if s >= 500 && s != http.StatusServiceUnavailable {
			f.Other5xx += n
		}
	}
	f.NoRetryAfter = r.rec.noRetryAfter
	f.Unexpected = len(r.rec.unexpected)
	unexpected := append([]string(nil), r.rec.unexpected...)
	r.rec.mu.Unlock()
	if f.Other5xx > 0 {
		f.violate("%d answers were a 5xx other than 503: %v", f.Other5xx, f.Answers)
	}
	if f.NoRetryAfter > 0 {
		f.violate("%d answers 503 came without Retry-After", f.NoRetryAfter)
	}
	for _, u := range unexpected {
		f.violate("unexpected answer: %s", u)
	}
}

// The worker's log messages for a lease taken over after it expired (a
// killed or stalled attempt's), and for an attempt that lost its lease and
// wrote nothing.
const (
	msgTakeover = "took over an expired lease"
	msgFenced   = "lost the lease before completing: wrote nothing"
)

// verifyIntent checks one intent: accepted, final, succeeded; two more
// replays and GET /v1/labels/{id} byte-identical to each other and to every
// 201 the intent's requests got. It returns the request id and the carrier's
// label id.
func (r *run) verifyIntent(ctx context.Context, in *intent) (requestID, carrierLabelID string) {
	f := r.fig
	in.mu.Lock()
	accepted, outcome, sentID := in.accepted, in.outcome, in.requestID
	created := append([][]byte(nil), in.created...)
	in.mu.Unlock()
	name := fmt.Sprintf("intent %d (caller %s, key %s)", in.n, in.caller.name, in.key)
	if !accepted {
		f.violate("%s was never accepted: %s", name, outcome)
		f.addNeverAccepted()
		return "", ""
	}
	rng := rand.New(rand.NewPCG(uint64(in.n), 99))
	ans, ok := r.api.get(ctx, rng, "/v1/label-requests?"+url.Values{"idempotency_key": {in.key}}.Encode(), in.caller.token)
	if !ok || ans.status != http.StatusOK {
		f.violate("%s: GET by key answered %d (%v): %s", name, ans.status, ans.err, ans.body)
		return "", ""
	}
	var lr labelRequest
	if err := json.Unmarshal(ans.body, &lr); err != nil {
		f.violate("%s: GET by key: %v", name, err)
		return "", ""
	}
	if sentID != "" && sentID != lr.ID {
		f.violate("%s: accepted as %s, found as %s", name, sentID, lr.ID)
	}
	if lr.Status != "succeeded" {
		f.violate("%s (%s) is %s, not succeeded: %s", name, lr.ID, lr.Status, lr.Error)
		return lr.ID, ""
	}
	var label struct {
		LabelID        string `json:"label_id"`
		CarrierLabelID string `json:"carrier_label_id"`
	}
	if err := json.Unmarshal(lr.Label, &label); err != nil || label.LabelID == "" {
		f.violate("%s (%s) succeeded without a label: %s", name, lr.ID, lr.Label)
		return lr.ID, ""
	}

	plain, _ := in.rendering(true)
	other, otherKey := in.rendering(false)
	a1 := r.api.replay(ctx, rng, in, plain, in.key)
	a2 := r.api.replay(ctx, rng, in, other, otherKey)
	a3, _ := r.api.get(ctx, rng, "/v1/labels/"+label.LabelID, in.caller.token)
	f.addReplays(1)
	mismatch := false
	defer func() {
		if mismatch {
			f.addReplayMismatch()
		}
	}()
	bad := func(format string, args ...any) {
		mismatch = true
		f.violate("%s (%s): "+format, append([]any{name, lr.ID}, args...)...)
	}
	for _, a := range []answer{a1, a2} {
		if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "true" {
			bad("a replay answered %d (Idempotent-Replayed %q, %v): %s", a.status, a.header.Get("Idempotent-Replayed"), a.err, a.body)
			return lr.ID, label.CarrierLabelID
		}
	}
	if a3.status != http.StatusOK {
		bad("GET /v1/labels/%s answered %d: %s", label.LabelID, a3.status, a3.body)
		return lr.ID, label.CarrierLabelID
	}
	if !bytes.Equal(a1.body, a2.body) {
		bad("two replays differ:\n%s\n%s", a1.body, a2.body)
	}
	if !bytes.Equal(a1.body, a3.body) {
		bad("the replay and GET /v1/labels/%s differ:\n%s\n%s", label.LabelID, a1.body, a3.body)
	}
	for _, c := range created {
		if !bytes.Equal(a1.body, c) {
			bad("a 201 during the run differs from the replay:\n%s\n%s", c, a1.body)
			break
		}
	}
	return lr.ID, label.CarrierLabelID
}

// replay sends a repeat of the intent, retrying transient failures for at
// most sendBound.
func (a *api) replay(ctx context.Context, rng *rand.Rand, in *intent, body []byte, key string) answer {
	ctx, cancel := context.WithTimeout(ctx, sendBound)
	defer cancel()
	for n := 0; ; n++ {
		ans := a.do(ctx, http.MethodPost, "/v1/labels", in.caller.token, body, "Idempotency-Key", key)
		if !transient(ans) || pause(ctx, rng, n, ans) != nil {
			return ans
		}
	}
}

func (r *run) carrierGet(ctx context.Context, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.fleet.carrierURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := r.api.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
