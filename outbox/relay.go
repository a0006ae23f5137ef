package outbox

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/internal/group"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/notify"
)

// DefaultBatchSize is the most rows a relay dispatches in one transaction.
const DefaultBatchSize = 500

// RelayOpts tunes a [Relay].
type RelayOpts struct {
	// BatchSize is the most intents dispatched in one transaction (default
	// [DefaultBatchSize]).
	BatchSize int
	// Backlog bounds River's backlog for the relay of intents: it moves no
	// more intents into River than keep the jobs of the queue its jobs go to
	// (jobs.QueueLabels) that are waiting to run (available, not yet running;
	// every worker's together) at Backlog, and the rest of a burst waits in
	// the outbox, where the callers take turns. 0: no bound (River runs
	// whatever is queued in order). The relay of webhook events ignores it.
	Backlog int
	// PollInterval is the fallback when no notification arrives (default 1s).
	PollInterval time.Duration
	// Listener wakes the relay when an intent is accepted; nil means poll only.
	Listener *notify.Listener
	// Linger is how long a relay woken by a notification waits before it
	// dispatches, so that the intents accepted meanwhile go in the same
	// transaction (at a moderate rate each API process notifies up to every
	// 100 ms, each notification for the intents of those 100 ms); 0: none. A wake by the poll
	// or by room in River's backlog dispatches at once. The relay of
	// webhook events ignores it.
	Linger time.Duration
	// Timer starts the linger's wait, for tests to give their own; nil: a
	// real timer.
	Timer func(d time.Duration) (c <-chan time.Time, stop func())
	// OnDispatchFunc, when set, is told how many intents each batch dispatched.
	OnDispatchFunc func(n int)
}

// Relay turns undispatched intents into River jobs. Every worker process runs
// one; several at once never dispatch an intent twice: each batch locks its
// rows of the queue (FOR UPDATE SKIP LOCKED) and deletes them in the
// transaction that inserts their jobs, and the jobs are unique by request id
// besides.
//
// The callers take turns (sqlDispatch), and with a Backlog the
// relay keeps River's queue short: River runs its queue in order, so what is
// in it is what another caller's next intent waits behind. While River's
// backlog is at its bound the relay waits for jobs to start ([Relay.JobStarted])
// or for its poll, not for new intents.
type Relay struct {
	opts    RelayOpts
	log     zerolog.Logger
	take    func(context.Context) (dispatched, error)
	channel string // the notification that wakes it
	what    string // for its log lines

	// Jobs started since the last room signal, and the signal: every
	// startsPerRoom starts, room has a value.
	started       atomic.Int64
	startsPerRoom int64
	room          chan struct{}

	mu    sync.Mutex
	after string // the caller served last, where the next batch's round robin starts after
}

// NewRelay returns the relay of intents (table label_intent_outbox, written
// by the accept): it inserts their buy_label jobs through client, in its own
// transaction. Call Run to start it.
func NewRelay(pool *pgxpool.Pool, client *river.Client[pgx.Tx], log zerolog.Logger, opts *RelayOpts) *Relay {
	return newRelay(pool, insertBuyLabels(client), log, opts)
}

// newRelay is [NewRelay] with the insert of the jobs given.
func newRelay(pool *pgxpool.Pool, insert insertFunc, log zerolog.Logger, opts *RelayOpts) *Relay {
	o := RelayOpts{}
	if opts != nil {
		o = *opts
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.Backlog < 0 {
		o.Backlog = 0
	}
	r := &Relay{opts: o, log: log, channel: notify.ChannelIntents, what: "relay",
		// Room is looked for after a quarter of the backlog has started: a
		// refill is a quarter of it at least, and River's queue never runs dry.
		startsPerRoom: int64(max(1, o.Backlog/4)), room: make(chan struct{}, 1)}
	r.take = func(ctx context.Context) (dispatched, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		d, err := dispatchIntents(ctx, pool, dispatchOpts{
			Batch: o.BatchSize, Backlog: o.Backlog, Queue: jobs.QueueLabels, After: r.after}, insert)
		if err == nil {
			r.after = d.Last
		}
		return d, err
	}
	return r
}

// NewEventRelay returns the relay of webhook events (table webhook_events,
// written by the completion): the same loop over undispatched events, woken
// by the notification of a completion that wrote an event, inserting their
// deliver_webhook jobs through client. opts.Listener must listen on
// notify.ChannelWebhookEvents to wake it.
func NewEventRelay(pool *pgxpool.Pool, client *river.Client[pgx.Tx], log zerolog.Logger, opts *RelayOpts) *Relay {
	return newEventRelay(pool, insertWebhooks(client), log, opts)
}

// newEventRelay is [NewEventRelay] with the insert of the jobs given.
func newEventRelay(pool *pgxpool.Pool, insert insertFunc, log zerolog.Logger, opts *RelayOpts) *Relay {
	r := newRelay(pool, insert, log, opts)
	batch := r.opts.BatchSize
	r.take = func(ctx context.Context) (dispatched, error) {
		n, err := dispatchEvents(ctx, pool, batch, insert)
		return dispatched{Taken: n, Room: batch, Left: n == batch}, err
	}
	r.opts.Backlog, r.opts.Linger, r.channel, r.what = 0, 0, notify.ChannelWebhookEvents, "webhook relay"
	return r
}

// JobStarted tells the relay that one of its jobs started to run: one less
// waits in River's queue. Every quarter of the backlog, it wakes a relay
// that waits for room. Cheap; call it from any goroutine.
func (r *Relay) JobStarted() {
	if r.opts.Backlog <= 0 || r.started.Add(1) < r.startsPerRoom {
		return
	}
	r.started.Store(0)
	select {
	case r.room <- struct{}{}:
	default:
	}
}

// Run dispatches until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	var wake <-chan struct{}
	if r.opts.Listener != nil {
		ch, cancel := r.opts.Listener.Subscribe(r.channel, "")
		defer cancel()
		wake = ch
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		d, err := r.dispatch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn().Err(err).Dur("retry_in_ms", backoff).Msg(r.what + ": dispatch failed")
			sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		full := false
		switch {
		case d.Left && d.Taken > 0 && (d.Taken < d.Room || d.Room == r.opts.BatchSize):
			continue // more may be taken now: a caller past its share, or a full batch
		case d.Left && d.Room < r.opts.BatchSize:
			// River's backlog is at its bound: what frees room is a job
			// starting, not a new intent.
			full = true
		}
		intents, room := wake, (<-chan struct{})(nil)
		if full {
			intents, room = nil, r.room
		}
		timer := time.NewTimer(r.opts.PollInterval)
		select {
		case <-ctx.Done():
		case <-intents:
			r.linger(ctx)
		case <-room:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// linger waits opts.Linger (or until ctx ends) after a notification.
func (r *Relay) linger(ctx context.Context) {
	if r.opts.Linger <= 0 {
		return
	}
	start := r.opts.Timer
	if start == nil {
		start = group.StartTimer
	}
	expired, stop := start(r.opts.Linger)
	defer stop()
	select {
	case <-ctx.Done():
	case <-expired:
	}
}

// DispatchBatch dispatches up to one batch of the undispatched rows (the
// callers in turns, within the backlog's bound) and returns how many it
// dispatched.
func (r *Relay) DispatchBatch(ctx context.Context) (int, error) {
	d, err := r.dispatch(ctx)
	return d.Taken, err
}

func (r *Relay) dispatch(ctx context.Context) (dispatched, error) {
	d, err := r.take(ctx)
	if err == nil && d.Taken > 0 && r.opts.OnDispatchFunc != nil {
		r.opts.OnDispatchFunc(d.Taken)
	}
	return d, err
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
