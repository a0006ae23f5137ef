package outbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/postgres"
)

// RelayOpts tunes a [Relay].
type RelayOpts struct {
	// BatchSize is the most intents dispatched in one transaction (default 500).
	BatchSize int
	// PollInterval is the fallback when no notification arrives (default 1s).
	PollInterval time.Duration
	// Listener wakes the relay when an intent is accepted; nil means poll only.
	Listener *notify.Listener
	// OnDispatchFunc, when set, is told how many intents each batch dispatched.
	OnDispatchFunc func(n int)
}

// Relay turns undispatched intents into River jobs. Every worker process runs
// one; several at once never dispatch an intent twice: each batch locks its
// rows of the queue (FOR UPDATE SKIP LOCKED) and deletes them in the
// transaction that inserts their jobs, and the jobs are unique by request id
// besides.
type Relay struct {
	pool     *pgxpool.Pool
	dispatch postgres.DispatchFunc
	opts     RelayOpts
	log      zerolog.Logger
	take     func(context.Context, *pgxpool.Pool, int, postgres.DispatchFunc) (int, error)
	channel  string // the notification that wakes it
	what     string // for its log lines
}

// NewRelay returns a relay; call Run to start it.
func NewRelay(pool *pgxpool.Pool, dispatch postgres.DispatchFunc, log zerolog.Logger, opts *RelayOpts) *Relay {
	o := RelayOpts{}
	if opts != nil {
		o = *opts
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	return &Relay{pool: pool, dispatch: dispatch, opts: o, log: log,
		take: postgres.DispatchIntents, channel: notify.ChannelIntents, what: "relay"}
}

// NewEventRelay returns the relay of webhook events (table webhook_events,
// written by the completion): the same loop over undispatched events, woken
// by the notification of a final intent. opts.Listener must listen on
// notify.ChannelFinal to wake it.
func NewEventRelay(pool *pgxpool.Pool, dispatch postgres.DispatchFunc, log zerolog.Logger, opts *RelayOpts) *Relay {
	r := NewRelay(pool, dispatch, log, opts)
	r.take, r.channel, r.what = postgres.DispatchWebhookEvents, notify.ChannelFinal, "webhook relay"
	return r
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
		n, err := r.DispatchBatch(ctx)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			r.log.Warn().Err(err).Dur("retry_in", backoff).Msg(r.what + ": dispatch failed")
			sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		case n == r.opts.BatchSize:
			continue // more may be waiting
		}
		backoff = 100 * time.Millisecond
		timer := time.NewTimer(r.opts.PollInterval)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// DispatchBatch dispatches up to one batch of the oldest undispatched rows
// and returns how many it dispatched.
func (r *Relay) DispatchBatch(ctx context.Context) (int, error) {
	n, err := r.take(ctx, r.pool, r.opts.BatchSize, r.dispatch)
	if err == nil && n > 0 && r.opts.OnDispatchFunc != nil {
		r.opts.OnDispatchFunc(n)
	}
	return n, err
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
