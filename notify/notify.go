// Package notify fans PostgreSQL notifications (LISTEN/NOTIFY) out to the
// goroutines of one process over a single dedicated connection.
//
// The relay uses it to wake up when an intent is accepted ([Listener.Subscribe]),
// and the API uses it to answer Prefer: wait without holding a pooled
// connection per waiting request: one [Listener.Watch] hands it the request id
// of every completion, which it routes to the requests waiting on that id.
// Notifications are hints, never the only path: after a reconnect every
// subscriber is woken and every watcher told (some notifications may have
// been missed), and every user polls as a fallback (the API in one query for
// all its waiting requests).
//
// The listening connection is a session held for the life of the process, so
// it cannot go through a pooler in transaction mode: the binaries give it
// DATABASE_DIRECT_URL when DATABASE_URL is pooled, and run no Listener at all
// (their users poll) when there is no direct URL. The Notifier's NOTIFY is an
// ordinary transaction and goes through the pool.
package notify

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// Channels used by the project.
const (
	// ChannelIntents carries nothing useful in its payload: an intent was accepted.
	ChannelIntents = "label_intents"
	// ChannelFinal carries the request ids of intents that became final
	// (joined by commas), sent by the completion's own transaction.
	ChannelFinal = "label_request_final"
	// ChannelWebhookEvents carries nothing useful in its payload: a
	// completion wrote a webhook event. A completion that wrote none does
	// not send it.
	ChannelWebhookEvents = "label_webhook_events"
)

// Listener holds one connection that listens on a fixed set of channels.
type Listener struct {
	connConfig *pgx.ConnConfig
	channels   []string
	log        zerolog.Logger

	mu       sync.Mutex
	subs     map[string]map[string]map[chan struct{}]struct{} // channel → payload ("" = any) → subscribers
	watchers map[string]map[*watcher]struct{}                 // channel → watchers
}

// watcher is one [Listener.Watch].
type watcher struct {
	fn func(payload string, reconnected bool)
}

// NewListener returns a listener on channels; call Run to start it.
func NewListener(connConfig *pgx.ConnConfig, log zerolog.Logger, channels ...string) *Listener {
	return &Listener{connConfig: connConfig, channels: channels, log: log,
		subs: map[string]map[string]map[chan struct{}]struct{}{}, watchers: map[string]map[*watcher]struct{}{}}
}

// Watch calls fn with every value notified on channel (one call per value of
// a payload that joins several, as the [Notifier] sends them), and with
// reconnected true and an empty payload whenever the listener has connected
// again, when notifications may have been missed. fn runs on the listener's
// goroutine, one call at a time: it must return quickly and must not call the
// listener. Call cancel when done; fn is not called after cancel returns.
func (l *Listener) Watch(channel string, fn func(payload string, reconnected bool)) (cancel func()) {
	w := &watcher{fn: fn}
	l.mu.Lock()
	set := l.watchers[channel]
	if set == nil {
		set = map[*watcher]struct{}{}
		l.watchers[channel] = set
	}
	set[w] = struct{}{}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(set, w)
		l.mu.Unlock()
	}
}

// Subscribe returns a channel that receives a value (coalesced: one pending
// value at most) whenever channel is notified with payload, or with any payload
// when payload is empty, and whenever the listener reconnects. Call cancel when done.
func (l *Listener) Subscribe(channel, payload string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	byPayload := l.subs[channel]
	if byPayload == nil {
		byPayload = map[string]map[chan struct{}]struct{}{}
		l.subs[channel] = byPayload
	}
	set := byPayload[payload]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		byPayload[payload] = set
	}
	set[ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(set, ch)
		if len(set) == 0 {
			delete(byPayload, payload)
		}
		l.mu.Unlock()
	}
}

func (l *Listener) dispatch(channel, payload string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Under the lock, so that no watcher is called after its cancel returned.
	for w := range l.watchers[channel] {
		w.fn(payload, all)
	}
	for p, set := range l.subs[channel] {
		if all || p == "" || p == payload {
			for ch := range set {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}
}

// Run listens until ctx ends, reconnecting with backoff when the connection fails.
func (l *Listener) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		l.log.Warn().Err(err).Dur("retry_in_ms", backoff).Msg("notification listener lost its connection")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *Listener) listen(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.connConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, c := range l.channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{c}.Sanitize()); err != nil {
			return err
		}
	}
	connected()
	// Anything may have happened while we were not listening.
	for _, c := range l.channels {
		l.dispatch(c, "", true)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		// A payload may carry several values, joined by commas (see Notifier).
		for _, p := range strings.Split(n.Payload, ",") {
			l.dispatch(n.Channel, p, false)
		}
	}
}
