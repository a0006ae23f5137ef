package jobs

import (
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultWebhookConcurrency is WEBHOOK_CONCURRENCY's default: the deliveries
// one worker process runs at once (River's MaxWorkers of the queue
// webhooks).
const DefaultWebhookConcurrency = 20

// DefaultWebhookEndpointConcurrency is WEBHOOK_ENDPOINT_CONCURRENCY's
// default: the attempts at one endpoint one worker process has in flight.
const DefaultWebhookEndpointConcurrency = 4

// DefaultWebhookHoldMax is the longest a delivery held for its endpoint's
// limit waits before it asks for a slot again.
const DefaultWebhookHoldMax = 2 * time.Minute

// minHoldStep is the least spacing between two held deliveries of one
// endpoint asked back: River fetches every 100 ms at most, so closer turns
// would only be fetched and held again.
const minHoldStep = 50 * time.Millisecond

// endpointLimiter bounds, in one worker process, the delivery attempts in
// flight per endpoint (a caller has one), so that an endpoint that answers
// slowly or never holds a few of the process's slots and not all of them:
//
//   - an endpoint with no attempt in flight here is always let through (a
//     River slot is running the job, so one is free);
//   - one with n in flight gets another only while n < perEndpoint and the
//     process's attempts in flight stay below slots − reserve, the reserve
//     (a quarter of the slots) being kept for endpoints with none in flight,
//     so that several slow endpoints together cannot fill the process either.
//
// A delivery that is refused a slot is held: its job is snoozed (no attempt
// counted, by us or by River) until its turn, which acquire computes from
// the endpoint's own pace: each held delivery of an endpoint is asked back
// one step after the previous one, a step being the endpoint's attempt
// duration (the moving average of its attempts here, or the age of its
// oldest attempt in flight if longer) divided by its attempts in flight, and
// never later than holdMax from now. The endpoint's held deliveries thus come
// back about as fast as its slots free, and cost River one fetch each per
// turn rather than one per fetch cycle.
//
// The bound is per process: a fleet of P workers has at most P·perEndpoint
// attempts in flight at one endpoint, and every process keeps its other
// slots for the other endpoints.
type endpointLimiter struct {
	perEndpoint int
	slots       int
	reserve     int
	holdMax     time.Duration
	now         func() time.Time
	jitter      func(time.Duration) time.Duration

	mu       sync.Mutex
	inFlight int // attempts in flight here, every endpoint
	eps      map[string]*endpointState
	swept    time.Time
}

// endpointState is one endpoint's attempts in this process.
type endpointState struct {
	started []time.Time   // the start of each attempt in flight
	avg     time.Duration // moving average of its attempts' durations; 0: none yet
	horizon time.Time     // the turn given to its last held delivery
}

func newEndpointLimiter(perEndpoint, slots int, holdMax time.Duration) *endpointLimiter {
	perEndpoint, slots = max(perEndpoint, 1), max(slots, 1)
	return &endpointLimiter{
		perEndpoint: perEndpoint,
		slots:       slots,
		reserve:     slots / 4,
		holdMax:     holdMax,
		now:         time.Now,
		jitter: func(d time.Duration) time.Duration {
			if d <= 0 {
				return 0
			}
			return time.Duration(rand.Int64N(int64(d)))
		},
		eps: map[string]*endpointState{},
	}
}

// endpointSlot is one attempt let through; release it when the attempt's
// request is over.
type endpointSlot struct {
	l        *endpointLimiter
	endpoint string
	start    time.Time
	once     sync.Once
}

// acquire lets an attempt at endpoint through (a slot) or holds it: then
// the slot is nil and hold is how long its job waits for its turn.
func (l *endpointLimiter) acquire(endpoint string) (slot *endpointSlot, hold time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	e := l.eps[endpoint]
	if e == nil {
		e = &endpointState{}
		l.eps[endpoint] = e
	}
	n := len(e.started)
	if n == 0 || n < l.perEndpoint && l.inFlight < l.slots-l.reserve {
		e.started = append(e.started, now)
		l.inFlight++
		return &endpointSlot{l: l, endpoint: endpoint, start: now}, 0
	}
	d := e.avg
	if age := now.Sub(e.started[0]); age > d {
		d = age
	}
	step := max(d/time.Duration(n), minHoldStep)
	turn := e.horizon
	if turn.Before(now) {
		turn = now
	}
	turn = turn.Add(step)
	if last := now.Add(l.holdMax); turn.After(last) {
		turn = last
	}
	e.horizon = turn
	return nil, min(turn.Sub(now)+l.jitter(step), l.holdMax)
}

// release ends the slot's attempt (once; later calls, or a nil slot, do
// nothing).
func (s *endpointSlot) release() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		l := s.l
		l.mu.Lock()
		defer l.mu.Unlock()
		e := l.eps[s.endpoint]
		// The oldest start equal to ours goes: attempts of one endpoint
		// start in order, so started stays sorted.
		for i, t := range e.started {
			if t.Equal(s.start) {
				e.started = append(e.started[:i], e.started[i+1:]...)
				break
			}
		}
		l.inFlight--
		took := l.now().Sub(s.start)
		if e.avg == 0 {
			e.avg = took
		} else {
			e.avg = (3*e.avg + took) / 4
		}
	})
}

// sweep forgets, at most once a minute, the endpoints with nothing in
// flight whose last held delivery's turn is past: the map holds the
// endpoints in use, not every caller ever served.
func (l *endpointLimiter) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	for k, e := range l.eps {
		if len(e.started) == 0 && e.horizon.Before(now) {
			delete(l.eps, k)
		}
	}
}
