package sim

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Purchase is one label the simulator sold, as /sim/purchases lists it and the
// state file keeps it.
type Purchase struct {
	CarrierLabelID string `json:"carrier_label_id"`
	TrackingNo     string `json:"tracking_no"`
	// IdempotencyKey is the key the call sent, even in NoKeys mode.
	IdempotencyKey string `json:"idempotency_key"`
	// KeyIgnored is true when the label was bought in NoKeys mode: the key did
	// not dedupe it and the invoice bills it without a key.
	KeyIgnored  bool      `json:"key_ignored,omitempty"`
	Reference   string    `json:"reference"`
	OrderID     int64     `json:"order_id"`
	ParcelNo    int       `json:"parcel_no"`
	Service     string    `json:"service"`
	WeightG     int       `json:"weight_g"`
	CostCents   int64     `json:"cost_cents"`
	Currency    string    `json:"currency"`
	PurchasedAt time.Time `json:"purchased_at"`
	// VoidedAt is when the label was voided; absent while it is not.
	VoidedAt *time.Time `json:"voided_at,omitempty"`

	seq   int64
	event int64 // its place among the purchases and voids, for the invoice
}

// Stats counts what the simulator did since it started or was reset.
type Stats struct {
	// Purchases is the number of labels bought (kept in the state file).
	Purchases int `json:"purchases"`
	// Calls is the number of POST /v1/labels calls received, whatever their answer.
	Calls int64 `json:"calls"`
	// ByKey is the number of labels bought per Idempotency-Key sent; more than
	// one only happens in NoKeys mode.
	ByKey map[string]int `json:"by_key"`
	// Replays is the number of 200 answers.
	Replays int64 `json:"replays"`
	// InProgress is the number of 409 answers.
	InProgress int64 `json:"in_progress"`
	// Failed is the number of 503 answers drawn by FailRate.
	Failed int64 `json:"failed"`
	// Rejected is the number of 400 and 422 answers.
	Rejected int64 `json:"rejected"`
	// Dropped is the number of purchases whose reply was dropped.
	Dropped int64 `json:"dropped"`
	// TimedOut is the number of purchases delayed by TimeoutRate.
	TimedOut int64 `json:"timed_out"`
	// InFlight is the number of purchases started and not yet bought.
	InFlight int `json:"in_flight"`
	// Voids is the number of labels voided (a replay of a void is not one);
	// absent while zero.
	Voids int64 `json:"voids,omitempty"`
	// VoidReplays is the number of void calls answered with a saved answer
	// (Idempotent-Replayed: true); absent while zero.
	VoidReplays int64 `json:"void_replays,omitempty"`
}

// Server is the carrier simulator. Build it with [New]; it is safe for
// concurrent use.
type Server struct {
	mux *http.ServeMux

	mu        sync.Mutex
	opts      Options
	rng       *rand.Rand
	nextSeq   int64
	purchases []Purchase
	byKey     map[string]int // key → index in purchases of the label it bought
	tracking  map[string]bool
	inFlight  map[string]bool // keys whose first purchase is under way
	byLabel   map[string]int  // carrier label id → index in purchases
	voidKeys  map[string]voidAnswer
	voids     []voidEvent // in the order they happened
	events    int64       // purchases and voids so far
	offset    time.Duration
	stats     Stats
	journal   *journal
	closing   bool
	// traceparents are the traceparent headers of the purchase calls ("":
	// none), in order.
	traceparents []string

	done   chan struct{} // closed by Close: wakes every wait
	active sync.WaitGroup
}

// New returns a simulator with opts (nil for a well-behaved one), loading the
// state file if opts names one.
func New(opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.normalize()

	s := &Server{
		opts:    o,
		rng:     newRand(o.Seed),
		nextSeq: 1,
		done:    make(chan struct{}),
	}
	s.clearLocked()
	if o.StateFile != "" {
		j, loaded, nextSeq, err := openJournal(o.StateFile)
		if err != nil {
			return nil, err
		}
		s.journal = j
		s.nextSeq = max(s.nextSeq, nextSeq)
		for _, rec := range loaded {
			switch {
			case rec.Purchase != nil:
				s.addLocked(*rec.Purchase)
			case rec.Void != nil:
				s.addVoidLocked(*rec.Void)
			}
		}
	}
	s.routes()
	return s, nil
}

func newRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x5eed))
}

func (s *Server) clearLocked() {
	s.purchases = nil
	s.byKey = map[string]int{}
	s.tracking = map[string]bool{}
	s.inFlight = map[string]bool{}
	s.byLabel = map[string]int{}
	s.voidKeys = map[string]voidAnswer{}
	s.voids = nil
	s.traceparents = nil
	s.offset = 0
	inFlight := s.stats.InFlight
	s.stats = Stats{ByKey: map[string]int{}, InFlight: inFlight}
}

// addLocked records a purchase in memory (it is in the journal already).
func (s *Server) addLocked(p Purchase) {
	s.events++
	p.event = s.events
	s.byLabel[p.CarrierLabelID] = len(s.purchases)
	s.purchases = append(s.purchases, p)
	s.tracking[p.TrackingNo] = true
	if p.IdempotencyKey != "" {
		s.stats.ByKey[p.IdempotencyKey]++
		if !p.KeyIgnored {
			s.byKey[p.IdempotencyKey] = len(s.purchases) - 1
		}
	}
	s.stats.Purchases = len(s.purchases)
	s.nextSeq = max(s.nextSeq, p.seq+1)
}

// routes is the whole API of the simulator in one place.
func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("POST /v1/labels", s.auth(http.HandlerFunc(s.handleBuy)))
	mux.Handle("POST /v1/labels/{carrier_label_id}/void", s.auth(http.HandlerFunc(s.handleVoid)))
	mux.Handle("GET /v1/labels/{carrier_label_id}/document", s.auth(http.HandlerFunc(s.handleDocument)))
	mux.Handle("GET /v1/invoices", s.auth(http.HandlerFunc(s.handleInvoice)))
	mux.Handle("GET /sim/config", s.auth(http.HandlerFunc(s.handleGetConfig)))
	mux.Handle("POST /sim/config", s.auth(http.HandlerFunc(s.handleSetConfig)))
	mux.Handle("GET /sim/purchases", s.auth(http.HandlerFunc(s.handlePurchases)))
	mux.Handle("GET /sim/stats", s.auth(http.HandlerFunc(s.handleStats)))
	mux.Handle("POST /sim/reset", s.auth(http.HandlerFunc(s.handleReset)))
	mux.Handle("GET /sim/clock", s.auth(http.HandlerFunc(s.handleGetClock)))
	mux.Handle("POST /sim/clock", s.auth(http.HandlerFunc(s.handleSetClock)))
	s.mux = mux
}

// ServeHTTP serves the carrier protocol and the simulator's own endpoints:
//
//	POST /v1/labels                    buy a label (carrier.md)
//	POST /v1/labels/{id}/void          void a label (carrier.md)
//	GET  /v1/invoices?date=YYYY-MM-DD  the day's invoice, text/csv (carrier.md)
//	GET  /sim/config                   the options as JSON, durations as "500ms"
//	POST /sim/config                   change them; fields left out keep their value
//	GET  /sim/purchases                every [Purchase], in order
//	GET  /sim/stats                    [Stats]
//	POST /sim/reset                    forget every purchase and counter
//	GET  /sim/clock                    the simulator's time and its offset
//	POST /sim/clock                    move the clock: {"advance": "721h"} or {"offset": "0s"}
//	GET  /healthz                      "ok", no token needed
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		token := s.opts.Token
		s.mu.Unlock()
		if token != "" {
			got := r.Header.Get("Authorization")
			if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="carrier"`)
				writeProblem(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Options returns the options in force.
func (s *Server) Options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// SetOptions replaces the options in force. A new Seed restarts the random
// source; StateFile cannot change.
func (s *Server) SetOptions(o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o.normalize()
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.StateFile != s.opts.StateFile {
		return errors.New("state_file is set at start and cannot change")
	}
	if o.Seed != s.opts.Seed {
		s.rng = newRand(o.Seed)
	}
	s.opts = o
	return nil
}

// Purchases returns every label sold since the start or the last reset, in order.
func (s *Server) Purchases() []Purchase {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Purchase, len(s.purchases))
	copy(out, s.purchases)
	return out
}

// Traceparents returns the traceparent header of every purchase call
// received since the start or the last reset ("" for a call without one),
// in order: what a traced caller propagates.
func (s *Server) Traceparents() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.traceparents...)
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.ByKey = make(map[string]int, len(s.stats.ByKey))
	for k, v := range s.stats.ByKey {
		st.ByKey[k] = v
	}
	return st
}

// Reset forgets every purchase, void and counter, puts the clock back (no
// offset), and restarts the random source from Seed. Label ids keep counting.
// Purchases under way finish and are kept.
func (s *Server) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal != nil {
		if err := s.journal.reset(s.nextSeq); err != nil {
			return err
		}
	}
	s.clearLocked()
	s.rng = newRand(s.opts.Seed)
	return nil
}

// Close wakes every call that is waiting (a purchase that was timing out buys
// now, a call in its latency answers 503), waits for the purchases under way, and
// closes the state file. Calls after Close answer 503. Call it before the HTTP
// server's Shutdown, which would otherwise wait for the longest TimeoutDelay.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	close(s.done)
	s.mu.Unlock()

	s.active.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal != nil {
		return s.journal.close()
	}
	return nil
}

func (s *Server) handleGetConfig(w http.ResponseWriter, _ *http.Request) {
	o := toJSON(s.Options())
	o.Token = "" // write-only
	writeJSON(w, http.StatusOK, o)
}

func (s *Server) handleSetConfig(w http.ResponseWriter, r *http.Request) {
	cur := s.Options()
	j := toJSON(cur)
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		writeProblem(w, http.StatusBadRequest, "bad_config", err.Error())
		return
	}
	if err := s.SetOptions(j.apply(cur)); err != nil {
		writeProblem(w, http.StatusBadRequest, "bad_config", err.Error())
		return
	}
	s.handleGetConfig(w, r)
}

func (s *Server) handlePurchases(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Purchases())
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	if err := s.Reset(); err != nil {
		writeProblem(w, http.StatusInternalServerError, "reset_failed", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.Stats())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeProblem writes the carrier's error shape, {"code","message"}.
func writeProblem(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
}
