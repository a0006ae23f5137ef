package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labelkit/labels/carrier"
)

// voidAnswer is the answer saved under a void's Idempotency-Key: the same key
// gets it again, whatever happened since.
type voidAnswer struct {
	labelID string
	status  int
	body    []byte
}

// voidEvent is one void, for the invoice of its day.
type voidEvent struct {
	index int // in purchases
	at    time.Time
	event int64
}

// voidedLabel is the answer to a void: the label, voided.
type voidedLabel struct {
	carrier.Label
	Status   string    `json:"status"`
	VoidedAt time.Time `json:"voided_at"`
}

// nowLocked is the simulator's clock: Options.NowFunc moved by the offset of
// POST /sim/clock.
func (s *Server) nowLocked() time.Time {
	return s.opts.NowFunc().Add(s.offset)
}

// Advance moves the simulator's clock forward by d (backward for a negative
// d): labels bought before age by d, as they would in that much real time.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset += d
}

// addVoidLocked records a void (in the journal already, or read from it).
func (s *Server) addVoidLocked(v journalVoid) {
	i, ok := s.byLabel[v.CarrierLabelID]
	if !ok || s.purchases[i].VoidedAt != nil {
		return // a void of a label forgotten by a reset, or recorded twice
	}
	at := v.VoidedAt
	s.purchases[i].VoidedAt = &at
	s.events++
	s.voids = append(s.voids, voidEvent{index: i, at: at, event: s.events})
	s.stats.Voids++
	if v.Key != "" {
		body, _ := json.Marshal(s.purchases[i].voided())
		s.voidKeys[v.Key] = voidAnswer{labelID: v.CarrierLabelID, status: http.StatusOK, body: body}
	}
}

func (p Purchase) voided() voidedLabel {
	return voidedLabel{Label: p.label(""), Status: carrier.StatusVoided, VoidedAt: *p.VoidedAt}
}

// handleVoid serves POST /v1/labels/{carrier_label_id}/void. A void is
// decided under the lock: two calls at once for one label void it once, and
// the second answers as a replay. A void draws nothing from the random
// source, so the purchases' fates stay those of the seed.
func (s *Server) handleVoid(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("carrier_label_id")
	key := r.Header.Get("Idempotency-Key")
	if err := carrier.ValidateKey(key); err != nil {
		writeProblem(w, http.StatusBadRequest, "idempotency_key_invalid", "Idempotency-Key must be 1-255 visible ASCII characters")
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the carrier is shutting down")
		return
	}
	if prior, ok := s.voidKeys[key]; ok {
		if prior.labelID != id {
			writeProblem(w, http.StatusUnprocessableEntity, "idempotency_key_reused",
				fmt.Sprintf("this Idempotency-Key voided %s, not %s", prior.labelID, id))
			return
		}
		s.stats.VoidReplays++
		w.Header().Set("Idempotent-Replayed", "true")
		writeRaw(w, prior.status, prior.body)
		return
	}
	i, ok := s.byLabel[id]
	if !ok {
		writeProblem(w, http.StatusNotFound, "not_found", fmt.Sprintf("no label %s", id))
		return
	}
	p := &s.purchases[i]
	if p.VoidedAt != nil {
		// Voided before under another key: the same answer again.
		body, _ := json.Marshal(p.voided())
		s.voidKeys[key] = voidAnswer{labelID: id, status: http.StatusOK, body: body}
		s.stats.VoidReplays++
		w.Header().Set("Idempotent-Replayed", "true")
		writeRaw(w, http.StatusOK, body)
		return
	}
	now := s.nowLocked().UTC().Truncate(time.Second)
	if now.Sub(p.PurchasedAt) > s.opts.VoidWindow {
		body, _ := json.Marshal(struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{carrier.CodeVoidWindowClosed, fmt.Sprintf("%s was bought at %s, more than %s ago", id,
			p.PurchasedAt.Format(time.RFC3339), s.opts.VoidWindow)})
		s.voidKeys[key] = voidAnswer{labelID: id, status: http.StatusConflict, body: body}
		writeRaw(w, http.StatusConflict, body)
		return
	}
	v := journalVoid{CarrierLabelID: id, VoidedAt: now, Key: key}
	if s.journal != nil {
		// Before the answer: a void we answered for must survive a restart.
		if err := s.journal.appendVoid(v); err != nil {
			writeProblem(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
	}
	s.addVoidLocked(v)
	writeRaw(w, http.StatusOK, s.voidKeys[key].body)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// clockJSON is the shape of /sim/clock.
type clockJSON struct {
	Now    time.Time `json:"now"`
	Offset duration  `json:"offset"`
}

func (s *Server) handleGetClock(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	c := clockJSON{Now: s.nowLocked().UTC(), Offset: duration(s.offset)}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, c)
}

// handleSetClock moves the clock: {"advance": "721h"} adds to the offset,
// {"offset": "0s"} sets it; both at once are refused.
func (s *Server) handleSetClock(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Advance *duration `json:"advance"`
		Offset  *duration `json:"offset"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<12))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeProblem(w, http.StatusBadRequest, "bad_clock", err.Error())
		return
	}
	if (req.Advance == nil) == (req.Offset == nil) {
		writeProblem(w, http.StatusBadRequest, "bad_clock", `give one of "advance" or "offset"`)
		return
	}
	s.mu.Lock()
	if req.Advance != nil {
		s.offset += time.Duration(*req.Advance)
	} else {
		s.offset = time.Duration(*req.Offset)
	}
	s.mu.Unlock()
	s.handleGetClock(w, r)
}

// SeedDroppingFirstReply returns the first seed from 1 under which, with
// DropReplyRate set to dropReplyRate and no other misbehaviour, the first
// purchase call has its reply dropped and the second does not: how a test or
// the demo stages one lost reply (and, with NoKeys, the purchase bought
// twice). The fates come from the seed alone, so the n-th call after a
// (re)seed always meets the n-th fate. ok is false when none of the first
// thousand seeds does.
func SeedDroppingFirstReply(dropReplyRate float64) (seed int64, ok bool) {
	for seed := int64(1); seed <= 1000; seed++ {
		s := &Server{opts: Options{DropReplyRate: dropReplyRate}, rng: newRand(seed)}
		if first, second := s.drawLocked(), s.drawLocked(); first.drop && !second.drop {
			return seed, true
		}
	}
	return 0, false
}
