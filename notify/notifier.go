package notify

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// maxPayload keeps a notification below PostgreSQL's 8000-byte payload limit.
const maxPayload = 7900

// Notifier sends notifications after the fact, coalesced, outside the
// transactions they are about.
//
// A NOTIFY inside a transaction takes a database-wide lock at commit, held
// through the commit's WAL flush, which serialises every committing
// transaction that notifies: measured here, it was 70–94 % of what the
// accept's backends waited on under load when each accept notified. So the
// accept does not notify; it calls [Notifier.Notify] after its commit, and
// the notifier sends at most one NOTIFY per channel and interval, its
// payload the distinct values joined by commas. A notification lost in a
// crash between the commit and the flush costs only latency: every listener
// also polls. (The worker's completion notifies in its own transaction: one
// completion statement runs at a time per worker, a few a second at a
// moderate rate, and a transaction of its own for the notification would
// cost more than the lock.)
type Notifier struct {
	pool     *pgxpool.Pool
	interval time.Duration
	log      zerolog.Logger

	mu      sync.Mutex
	pending map[string]map[string]struct{} // channel → payloads
	wake    chan struct{}
}

// DefaultInterval is the notifier's least time between flushes: the relay's
// default linger (RELAY_LINGER, 100 ms), during which a further notification
// of intents wakes nothing the relay would not take anyway.
const DefaultInterval = 100 * time.Millisecond

// NewNotifier returns a notifier that flushes at most every interval
// (0: [DefaultInterval]); call Run to start it.
func NewNotifier(pool *pgxpool.Pool, interval time.Duration, log zerolog.Logger) *Notifier {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Notifier{pool: pool, interval: interval, log: log, pending: map[string]map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// Notify queues payload (which must not contain a comma) on channel.
func (n *Notifier) Notify(channel, payload string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	set := n.pending[channel]
	if set == nil {
		set = map[string]struct{}{}
		n.pending[channel] = set
	}
	set[payload] = struct{}{}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Run flushes queued notifications until ctx ends, then flushes once more.
func (n *Notifier) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			n.Flush(fctx)
			cancel()
			return
		case <-n.wake:
		}
		n.Flush(ctx)
		// Coalesce: whatever arrives during the pause goes out in the next flush.
		t := time.NewTimer(n.interval)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// Flush sends everything queued now.
func (n *Notifier) Flush(ctx context.Context) {
	n.mu.Lock()
	pending := n.pending
	n.pending = map[string]map[string]struct{}{}
	n.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	// One round trip. A notify-only transaction has nothing to make durable,
	// and NOTIFY's commit lock is held until the commit's WAL flush: do not wait for one.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit = off")
	for channel, set := range pending {
		for _, payload := range chunk(set) {
			b.Queue(`SELECT pg_notify($1, $2)`, channel, payload)
		}
	}
	b.Queue("COMMIT")
	if err := n.pool.SendBatch(ctx, b).Close(); err != nil {
		// Listeners poll as well: a lost wake-up only delays them.
		n.log.Debug().Err(err).Msg("notify failed")
	}
}

// chunk joins payloads with commas into pieces below maxPayload.
func chunk(set map[string]struct{}) []string {
	var out []string
	var b strings.Builder
	for p := range set {
		if b.Len() > 0 && b.Len()+1+len(p) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p)
	}
	if b.Len() > 0 || len(out) == 0 {
		out = append(out, b.String())
	}
	return out
}
