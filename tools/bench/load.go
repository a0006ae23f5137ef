package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labelkit/labels"
)

// The requests the load sends are the seed's example with the order id
// changed: each order id names one parcel (parcelFor) and one key (keyFor),
// so a repeat, or a replay of a filled key, can send the same key and body.

// keyFor is the derived key of the seed's form, label:{order}:{parcel}:v{version}.
func keyFor(order int64) string {
	return "label:" + strconv.FormatInt(order, 10) + ":1:v1"
}

var (
	services = []string{"ground", "express", "overnight"}
	cities   = []string{"Exampleton", "Musterstadt", "Berlin", "Hamburg", "München"}
)

// parcelVariants is how many different parcels there are besides the order id.
const parcelVariants = 1024

// parcelFor is the parcel of an order, with the defaults applied as the API
// applies them before it takes the fingerprint.
func parcelFor(order int64) labels.Parcel {
	h := uint64(order%parcelVariants) * 0x9E3779B97F4A7C15
	return labels.Parcel{
		OrderID:      order,
		ParcelNo:     1,
		WeightG:      100 + int(h%30_000),
		Service:      services[h%3],
		LabelVersion: 1,
		ShipTo: labels.Address{
			Name:       "Customer " + strconv.FormatUint(h%100_000, 10),
			Line1:      strconv.FormatUint(1+h%999, 10) + " Example Street",
			City:       cities[h%uint64(len(cities))],
			PostalCode: strconv.FormatUint(10_000+h%89_999, 10),
			Country:    "DE",
		},
	}
}

// bodyFor is the JSON body of an order's request.
func bodyFor(order int64) []byte {
	b, _ := json.Marshal(parcelFor(order))
	return b
}

// loadSpec is one closed-loop load.
type loadSpec struct {
	Name        string
	BaseURL     string // http://host:port
	Token       string
	Concurrency int
	Warmup      time.Duration
	Duration    time.Duration
	// RepeatShare of the requests repeat an earlier accepted key and body of
	// the same client (202 while pending, 201 once completed).
	RepeatShare float64
	// NextOrder hands out order ids for new requests.
	NextOrder *atomic.Int64
	// Count, when positive, ends the load after that many new requests (or
	// replays, with ReplayN) have been sent instead of after Duration.
	Count int64
	// ReplayFrom and ReplayN, when ReplayN is positive, make every request a
	// replay of a filled key: an order drawn uniformly from [ReplayFrom, ReplayFrom+ReplayN).
	ReplayFrom, ReplayN int64
	// Rate, when positive, paces the requests at that many per second
	// (spread over the goroutines) instead of sending them back to back;
	// Poisson draws the intervals at random (exponential, as pgbench -R
	// does) instead of evenly.
	Rate    float64
	Poisson bool
}

// conn is one client goroutine's keep-alive connection, on which it writes
// each request and reads the answer itself: net/http's transport hands each
// request to two goroutines and back, each hand-off a thread's wake-up.
type conn struct {
	addr string
	nc   net.Conn // nil: dialled on the next request
	r    *bufio.Reader
}

// clientStats is one goroutine's record.
type clientStats struct {
	lat, late []int64      // ns; late (paced): from the scheduled start to the client's
	n         map[bool]int // requests answered: repeats (true) and new ones
	statuses  map[int]int
	errors    int
	firstErr  string
}

// runLoad runs spec and returns what it measured. Requests that end during
// the warm-up are not counted; neither are requests started after the end.
func runLoad(ctx context.Context, spec loadSpec) LoadRun {
	start := time.Now()
	measureFrom := start.Add(spec.Warmup)
	end := measureFrom.Add(spec.Duration)
	if spec.Count > 0 {
		measureFrom = start
		end = start.Add(24 * time.Hour)
	}
	var sent atomic.Int64
	// With a rate, a pacer hands out the scheduled start times and latency is
	// measured from them, so a slow answer delays the count rather than the
	// schedule (no coordinated omission).
	var slots chan time.Time
	if spec.Rate > 0 {
		slots = make(chan time.Time, 4096)
		var rng *rand.Rand
		if spec.Poisson {
			rng = rand.New(rand.NewPCG(uint64(start.UnixNano()), 0))
		}
		go pace(ctx, slots, start, end, spec.Rate, rng)
	}
	stats := make([]*clientStats, spec.Concurrency)
	var wg sync.WaitGroup
	for g := range spec.Concurrency {
		st := &clientStats{statuses: map[int]int{}, n: map[bool]int{}}
		stats[g] = st
		wg.Go(func() {
			c := &conn{addr: strings.TrimPrefix(spec.BaseURL, "http://")}
			defer c.close()
			rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(g)))
			var mine []int64 // accepted orders of this goroutine, for repeats
			for ctx.Err() == nil {
				var began time.Time
				var late time.Duration
				if slots != nil {
					t, ok := <-slots
					if !ok {
						return
					}
					began, late = t, time.Since(t)
				} else if began = time.Now(); began.After(end) {
					return
				}
				// Count bounds the replays, or the new requests; not the repeats.
				repeat := spec.ReplayN > 0 || (len(mine) > 0 && rng.Float64() < spec.RepeatShare)
				if (spec.ReplayN > 0 || !repeat) && spec.Count > 0 && sent.Add(1) > spec.Count {
					return
				}
				var order int64
				switch {
				case spec.ReplayN > 0:
					order = spec.ReplayFrom + rng.Int64N(spec.ReplayN)
				case repeat:
					order = mine[rng.IntN(len(mine))]
				default:
					order = spec.NextOrder.Add(1)
				}
				status, err := c.post(ctx, spec.Token, keyFor(order), bodyFor(order))
				took := time.Since(began)
				counted := !began.Before(measureFrom)
				ok := err == nil && (status == http.StatusAccepted || (repeat && status == http.StatusCreated))
				if !repeat && status == http.StatusAccepted {
					if len(mine) < 4096 {
						mine = append(mine, order)
					} else {
						mine[rng.IntN(len(mine))] = order
					}
				}
				if !counted {
					continue
				}
				if err != nil && ctx.Err() != nil {
					return
				}
				if err == nil {
					st.statuses[status]++
				}
				if !ok {
					if st.errors++; st.firstErr == "" && err != nil {
						st.firstErr = err.Error()
					} else if st.firstErr == "" {
						st.firstErr = fmt.Sprintf("%s answered %d", map[bool]string{false: "a new key", true: "a repeat"}[repeat], status)
					}
					continue
				}
				st.n[repeat]++
				st.lat = append(st.lat, int64(took))
				if slots != nil {
					st.late = append(st.late, int64(late))
				}
			}
		})
	}
	wg.Wait()
	// The window ends when the last request started in it has been answered.
	elapsed := time.Since(measureFrom)
	r := LoadRun{Name: spec.Name, Concurrency: spec.Concurrency, Rate: spec.Rate, Seconds: round2(elapsed.Seconds()), Statuses: map[string]int{}}
	var late []int64
	for _, st := range stats {
		r.add(LoadRun{New: st.n[false], Repeats: st.n[true], Errors: st.errors, FirstError: st.firstErr, lat: st.lat})
		for k, v := range st.statuses {
			r.Statuses[strconv.Itoa(k)] += v
		}
		late = append(late, st.late...)
	}
	r.finish()
	if slots != nil {
		l := summarize(late)
		r.StartLateness = &l
	}
	return r
}

// add counts p's requests, errors and latencies into r.
func (r *LoadRun) add(p LoadRun) {
	r.New, r.Repeats, r.Errors = r.New+p.New, r.Repeats+p.Repeats, r.Errors+p.Errors
	r.FirstError = cmp.Or(r.FirstError, p.FirstError)
	for k, v := range p.Statuses {
		r.Statuses[k] += v
	}
	r.lat = append(r.lat, p.lat...)
}

// finish sums up r's requests over its seconds.
func (r *LoadRun) finish() {
	r.Requests = r.New + r.Repeats
	if r.Seconds > 0 {
		r.PerSec = round1(float64(r.Requests) / r.Seconds)
	}
	r.Latency = summarize(r.lat)
}

// pace hands out the start times of a load at rate per second from start
// until end, each when it comes, and closes slots. Latency is measured from
// these times, so the pacer's own lateness would count as the service's: it
// sleeps with a high-resolution timer (preciseSleeper). With rng the
// intervals are exponential (Poisson arrivals) of the same mean.
func pace(ctx context.Context, slots chan<- time.Time, start, end time.Time, rate float64, rng *rand.Rand) {
	defer close(slots)
	sleep, done := preciseSleeper()
	defer done()
	interval, draw := float64(time.Second)/rate, func() float64 { return 1 }
	if rng != nil {
		draw = rng.ExpFloat64
	}
	for next := start; next.Before(end) && ctx.Err() == nil; next = next.Add(time.Duration(draw() * interval)) {
		if d := time.Until(next); d > 0 {
			sleep(d)
		}
		select {
		case slots <- next:
		case <-ctx.Done():
			return
		}
	}
}

// post sends one create and reads the whole answer. (The API keeps an idle
// connection for 2 minutes: a load's clients are never idle that long.)
func (c *conn) post(ctx context.Context, token, key string, body []byte) (status int, err error) {
	if c.nc == nil {
		if c.nc, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", c.addr); err != nil {
			return 0, err
		}
		c.r = bufio.NewReader(c.nc)
	}
	var resp *http.Response
	_ = c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err = c.nc.Write(fmt.Appendf(nil, "POST /v1/labels HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", c.addr, token, key, len(body), body)); err == nil {
		if resp, err = http.ReadResponse(c.r, nil); err == nil {
			status, err = resp.StatusCode, resp.Body.Close() // Close reads the rest of the body
		}
	}
	if err != nil || resp.Close {
		c.close()
	}
	return status, err
}

// close closes the connection; the next request dials a new one.
func (c *conn) close() {
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
}

// summarize sorts ns (nanoseconds) and summarises it in milliseconds.
func summarize(ns []int64) Latency {
	if len(ns) == 0 {
		return Latency{}
	}
	slices.Sort(ns)
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	q := func(p float64) float64 {
		i := int(p*float64(len(ns))+0.5) - 1
		i = max(0, min(len(ns)-1, i))
		return ms(ns[i])
	}
	return Latency{
		Count: len(ns),
		Mean:  round3(sum / float64(len(ns)) / 1e6),
		P50:   q(0.50),
		P90:   q(0.90),
		P99:   q(0.99),
		P999:  q(0.999),
		Max:   ms(ns[len(ns)-1]),
	}
}

func ms(ns int64) float64 { return round3(float64(ns) / 1e6) }

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
