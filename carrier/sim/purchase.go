package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/labelkit/labels/carrier"
)

// service is one service the carrier offers, with its price list.
type service struct {
	prefix  string // tracking number prefix
	base    int64  // cents
	divisor int64  // one cent per this many grams
}

var services = map[string]service{
	"ground":    {prefix: "GRD", base: 450, divisor: 10},
	"express":   {prefix: "EXP", base: 900, divisor: 5},
	"overnight": {prefix: "OVN", base: 1800, divisor: 4},
}

// serviceNames in a fixed order, for draws that must not depend on map order.
var serviceNames = []string{"ground", "express", "overnight"}

// maxWeightG is the heaviest parcel the carrier takes.
const maxWeightG = 70_000

// Cost is what the simulator charges for a parcel: ground 450 + weight_g/10,
// express 900 + weight_g/5, overnight 1800 + weight_g/4 cents. ok is false for a
// service it does not offer.
func Cost(serviceName string, weightG int) (cents int64, ok bool) {
	svc, ok := services[serviceName]
	if !ok {
		return 0, false
	}
	return svc.base + int64(weightG)/svc.divisor, true
}

// fate is what the random source decided for one call.
type fate struct {
	latency time.Duration
	fail    bool
	timeout bool
	drop    bool
}

// drawLocked decides a call's fate. It always draws the same four numbers, so
// the n-th call gets the same fate for the same seed whatever the rates.
func (s *Server) drawLocked() fate {
	jitter, fail, timeout, drop := s.rng.Float64(), s.rng.Float64(), s.rng.Float64(), s.rng.Float64()
	o := &s.opts
	return fate{
		latency: o.Latency + time.Duration(jitter*float64(o.LatencyJitter)),
		fail:    fail < o.FailRate,
		timeout: timeout < o.TimeoutRate,
		drop:    drop < o.DropReplyRate,
	}
}

var errClosing = errors.New("simulator closing")

// wait waits d, or less when the client hangs up (ctx) or the simulator closes.
func (s *Server) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errClosing
	}
}

func (s *Server) handleBuy(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.stats.Calls++
	s.traceparents = append(s.traceparents, r.Header.Get("traceparent"))
	opts := s.opts
	f := s.drawLocked()
	s.mu.Unlock()

	if err := s.wait(r.Context(), f.latency); err != nil {
		if errors.Is(err, errClosing) {
			writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the carrier is shutting down")
		}
		return // else the client left: nobody to answer, nothing bought
	}

	key := r.Header.Get("Idempotency-Key")
	if opts.NoKeys {
		if carrier.ValidateKey(key) != nil {
			key = "" // ignored anyway; keep only what a test could look up
		}
	} else if err := carrier.ValidateKey(key); err != nil {
		s.count(func(st *Stats) { st.Rejected++ })
		writeProblem(w, http.StatusBadRequest, "idempotency_key_invalid", "Idempotency-Key must be 1-255 visible ASCII characters")
		return
	}

	var req carrier.PurchaseRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		s.count(func(st *Stats) { st.Rejected++ })
		writeProblem(w, http.StatusBadRequest, "bad_request", "the body is not a purchase: "+err.Error())
		return
	}

	if f.fail {
		s.count(func(st *Stats) { st.Failed++ })
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the carrier is temporarily unavailable")
		return
	}

	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the carrier is shutting down")
		return
	}
	if !opts.NoKeys {
		if i, ok := s.byKey[key]; ok {
			label := s.purchases[i].label(baseURL(r))
			s.stats.Replays++
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, label)
			return
		}
		if s.inFlight[key] {
			s.stats.InProgress++
			s.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusConflict, "in_progress", "a purchase with this key is still under way")
			return
		}
	}
	if status, code, msg := check(req, opts); status != 0 {
		s.stats.Rejected++
		s.mu.Unlock()
		writeProblem(w, status, code, msg)
		return
	}
	if !opts.NoKeys {
		s.inFlight[key] = true
	}
	s.stats.InFlight++
	if f.timeout {
		s.stats.TimedOut++
	}
	s.active.Add(1)
	s.mu.Unlock()
	defer s.active.Done()

	if f.timeout {
		// Whatever ends the wait, the purchase goes through: that is the failure
		// being simulated, a label bought after the client gave up.
		_ = s.wait(r.Context(), opts.TimeoutDelay)
	}

	p, err := s.buy(key, req, opts)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	if f.drop {
		s.count(func(st *Stats) { st.Dropped++ })
		dropReply(w)
		return
	}
	writeJSON(w, http.StatusCreated, p.label(baseURL(r)))
}

func (s *Server) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// check validates a purchase as a carrier would: a status and code when it is
// refused, 0 when it may be bought.
func check(req carrier.PurchaseRequest, opts Options) (status int, code, msg string) {
	switch {
	case req.Reference == "":
		return http.StatusBadRequest, "bad_request", "reference is required"
	case req.OrderID <= 0:
		return http.StatusBadRequest, "bad_request", "order_id must be positive"
	case req.ParcelNo <= 0:
		return http.StatusBadRequest, "bad_request", "parcel_no must be positive"
	}
	if _, ok := services[req.Service]; !ok {
		return http.StatusUnprocessableEntity, "service_not_offered", fmt.Sprintf("service %q is not offered (ground, express, overnight)", req.Service)
	}
	if req.WeightG <= 0 || req.WeightG > maxWeightG {
		return http.StatusUnprocessableEntity, "weight_invalid", fmt.Sprintf("weight_g must be between 1 and %d", maxWeightG)
	}
	a := req.ShipTo
	if strings.TrimSpace(a.Line1) == "" || strings.TrimSpace(a.City) == "" || strings.TrimSpace(a.PostalCode) == "" || strings.TrimSpace(a.Country) == "" {
		return http.StatusUnprocessableEntity, "address_invalid", "ship_to needs line1, city, postal_code and country"
	}
	if opts.RejectPostalCode != "" && a.PostalCode == opts.RejectPostalCode {
		return http.StatusUnprocessableEntity, "address_invalid", fmt.Sprintf("postal code %s is not served", a.PostalCode)
	}
	return 0, "", ""
}

// buy makes the purchase: a new label id, journal, memory.
func (s *Server) buy(key string, req carrier.PurchaseRequest, opts Options) (Purchase, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if !opts.NoKeys {
			delete(s.inFlight, key)
		}
		s.stats.InFlight--
	}()

	svc := services[req.Service]
	cost, _ := Cost(req.Service, req.WeightG)
	seq := s.nextSeq
	p := Purchase{
		CarrierLabelID: fmt.Sprintf("CL-%d", seq),
		TrackingNo:     s.trackingLocked(svc.prefix, req.OrderID),
		IdempotencyKey: key,
		KeyIgnored:     opts.NoKeys,
		Reference:      req.Reference,
		OrderID:        req.OrderID,
		ParcelNo:       req.ParcelNo,
		Service:        req.Service,
		WeightG:        req.WeightG,
		CostCents:      cost,
		Currency:       "USD",
		PurchasedAt:    s.nowLocked().UTC().Truncate(time.Second),
		seq:            seq,
	}
	if s.journal != nil {
		// Before the answer: a label we answered for must survive a restart.
		if err := s.journal.append(p); err != nil {
			return Purchase{}, err
		}
	}
	s.addLocked(p)
	return p, nil
}

// trackingLocked returns the tracking number for an order, unique among the
// labels sold.
func (s *Server) trackingLocked(prefix string, orderID int64) string {
	base := fmt.Sprintf("%s%09d", prefix, orderID)
	if !s.tracking[base] {
		return base
	}
	for n := 2; ; n++ {
		if t := fmt.Sprintf("%s-%d", base, n); !s.tracking[t] {
			return t
		}
	}
}

// dropReply closes the connection without an answer: the client cannot tell
// whether the label was bought.
func dropReply(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 cannot hijack; aborting the handler resets the stream instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
