package chaos

import (
	"context"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/labelkit/labels/client"
)

// hooks is the run's webhook receiver: a real HTTP server in this process,
// registered for both callers with `api webhook set`. It verifies every
// delivery with the caller's printed secret and records the webhook-ids. The
// first delivery of one event in seven is answered 503 with Retry-After: 1,
// so that retries happen under the disturbances too.
type hooks struct {
	srv *httptest.Server

	mu         sync.Mutex
	secrets    map[string]string // caller → secret
	requests   int
	byID       map[string]int    // webhook-id → deliveries that verified
	caller     map[string]string // webhook-id → the caller whose secret verified it
	unverified int
	refused    int // the 503s answered on purpose
}

func newHooks() *hooks {
	h := &hooks{secrets: map[string]string{}, byID: map[string]int{}, caller: map[string]string{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	return h
}

func (h *hooks) url(caller string) string { return h.srv.URL + "/hooks/" + caller }

func (h *hooks) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	caller := strings.TrimPrefix(r.URL.Path, "/hooks/")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	secret := h.secrets[caller]
	if err != nil || secret == "" {
		h.unverified++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	ev, err := client.VerifyWebhook(secret, r.Header, body, time.Now())
	if err != nil || ev.ID != "msg_"+ev.Data.ID {
		h.unverified++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	id := ev.ID
	f := fnv.New32a()
	f.Write([]byte(id))
	if f.Sum32()%7 == 0 && h.byID[id] == 0 && !strings.HasSuffix(h.caller[id], "!") {
		h.caller[id] = caller + "!" // refused once
		h.refused++
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.byID[id]++
	h.caller[id] = caller
	w.WriteHeader(http.StatusNoContent)
}

// setup registers the receiver for every caller of the run.
func (h *hooks) setup(ctx context.Context, r *run) error {
	for _, c := range r.callers {
		res, err := r.fleet.command(ctx, "api", "webhook", "set", c.name, h.url(c.name))
		if err != nil {
			return err
		}
		h.mu.Lock()
		h.secrets[c.name] = res.LastLine()
		h.mu.Unlock()
	}
	return nil
}

// drainHooks waits until no webhook event is pending (delivered or dropped),
// as drain does for intents.
func (r *run) drainHooks(ctx context.Context) {
	r.say("draining webhooks: waiting for every event to be delivered (at most %s)", r.cfg.DrainTimeout)
	if pending, ok := r.waitNonePending(ctx, "webhook events", `SELECT count(*) FROM webhook_events WHERE state = 'pending'`); !ok {
		r.fig.violate("%d webhook events still pending %s after the drain", pending, r.cfg.DrainTimeout)
	}
}

// verifyHooks checks the deliveries: every final intent has exactly one
// event, delivered, whose webhook-id the receiver saw (verified with its
// caller's secret), and the receiver saw no webhook-id of anything else.
func (r *run) verifyHooks(ctx context.Context) {
	f := r.fig
	rows, err := r.pool.Query(ctx, `
		SELECT i.request_id, i.caller_id, count(e.request_id), coalesce(min(e.event_id), ''), coalesce(min(e.state), '')
		  FROM label_intents i LEFT JOIN webhook_events e ON e.request_id = i.request_id
		 WHERE i.status <> 'pending'
		 GROUP BY i.request_id, i.caller_id`)
	if err != nil {
		f.violate("reading the webhook events: %v", err)
		return
	}
	defer rows.Close()
	h := r.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	final := map[string]bool{}
	for rows.Next() {
		var requestID, callerID, eventID, state string
		var events int
		if err := rows.Scan(&requestID, &callerID, &events, &eventID, &state); err != nil {
			f.violate("reading the webhook events: %v", err)
			return
		}
		f.FinalIntents++
		switch {
		case events != 1:
			f.violate("final intent %s has %d webhook events", requestID, events)
			continue
		case state != "delivered":
			f.violate("the webhook event of %s is %s, not delivered", requestID, state)
		}
		final[eventID] = true
		switch n := h.byID[eventID]; {
		case n == 0:
			f.WebhooksLost++
			f.violate("the webhook event %s (intent %s) never reached the receiver", eventID, requestID)
		case h.caller[eventID] != callerID:
			f.violate("the webhook event %s of %s verified with the secret of %q", eventID, callerID, h.caller[eventID])
		}
	}
	if err := rows.Err(); err != nil {
		f.violate("reading the webhook events: %v", err)
	}
	f.WebhookRequests, f.WebhookRefused, f.WebhookUnverified = h.requests, h.refused, h.unverified
	for id, n := range h.byID {
		f.WebhookIDs++
		f.WebhookRedelivered += n - 1
		if !final[id] {
			f.violate("the receiver got webhook-id %s, which is no final intent's", id)
		}
	}
	if h.unverified > 0 {
		f.violate("%d webhook deliveries did not verify", h.unverified)
	}
	if f.WebhookIDs != f.FinalIntents {
		f.violate("%d distinct webhook-ids for %d final intents", f.WebhookIDs, f.FinalIntents)
	}
}
