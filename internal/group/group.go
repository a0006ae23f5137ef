// Package group shares one statement, and so one commit, among calls that
// many goroutines make at about the same time.
package group

import (
	"context"
	"sync"
	"time"
)

// Group shares one statement, and so one commit, among the calls that many
// goroutines make at about the same time: group commit in the application.
//
// Each of a few flushers takes the first waiting call, adds whatever else is
// already waiting (up to max), and runs them together. Under heavy load the
// calls that arrive while the flushers are busy form the next batches. At a
// moderate rate few calls arrive during one run, and each batch holds one or
// two: with Linger set, a flusher whose last batch held fewer than LingerFew
// calls waits for more before it runs the next, until that batch holds
// LingerFew or Linger has passed since it took the first (a bounded wait,
// spent only when sharing was poor; a batch of LingerFew or more runs at
// once, and the next runs without waiting). The flushers start on the first
// call and then idle on a channel for the life of the process.
//
// A call is bounded by its own context: when it ends, [Group.Do] returns at
// once, whether the call is still queued (it is then never run) or in a
// batch that is running (the batch goes on for the others, and what it
// stores stays stored).
//
// A run holds its flusher until it returns, and every call queued meanwhile
// waits for it: Run should wait for nothing but its own statement. Work of
// one call that may wait for another session belongs after [Group.Do], in
// that call's goroutine: Run hands the call back in its output, and the
// caller does it alone (package accept does so for a busy row).
type Group[In, Out any] struct {
	// Max bounds the calls of one batch; Flushers is how many batches may run
	// at once; Timeout bounds one run (and no run outlives the latest
	// deadline of its calls); Run does a batch, returning one output per
	// input, in order.
	Max      int
	Flushers int
	Timeout  time.Duration
	Run      func(ctx context.Context, ins []In) ([]Out, error)
	// Linger is the longest a flusher waits for more calls after a batch
	// of fewer than LingerFew (at most Max); 0 never waits.
	Linger    time.Duration
	LingerFew int

	// Timer starts the linger's bound, for tests to give their own; nil: a
	// real timer. stop releases it.
	Timer func(d time.Duration) (c <-chan time.Time, stop func())

	once  sync.Once
	calls chan *groupCall[In, Out]
}

type groupCall[In, Out any] struct {
	ctx  context.Context
	in   In
	out  Out
	err  error
	done chan struct{}
}

// Do queues in and waits for its batch, or for ctx to end. A batch that
// fails fails each of its calls with the same error.
func (g *Group[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	g.once.Do(func() {
		g.calls = make(chan *groupCall[In, Out], g.Max*g.Flushers)
		for range g.Flushers {
			go g.flush()
		}
	})
	var zero Out
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c := &groupCall[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	select {
	case g.calls <- c:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

func (g *Group[In, Out]) flush() {
	batch := make([]*groupCall[In, Out], 0, g.Max)
	ins := make([]In, 0, g.Max)
	few := min(g.LingerFew, g.Max)
	last := 0 // calls in the last batch
	for c := range g.calls {
		batch = append(batch[:0], c)
	more:
		for len(batch) < g.Max {
			select {
			case c := <-g.calls:
				batch = append(batch, c)
			default:
				break more
			}
		}
		if g.Linger > 0 && last < few && len(batch) < few {
			batch = g.linger(batch, few)
		}
		last = len(batch)
		// Calls whose callers have left are not run.
		live := batch[:0]
		deadline, bounded := time.Time{}, true
		for _, c := range batch {
			if c.ctx.Err() != nil {
				close(c.done)
				continue
			}
			live = append(live, c)
			if d, ok := c.ctx.Deadline(); !ok {
				bounded = false
			} else if d.After(deadline) {
				deadline = d
			}
		}
		batch = live
		if len(batch) == 0 {
			continue
		}
		ins = ins[:0]
		for _, c := range batch {
			ins = append(ins, c.in)
		}
		// A batch is never cancelled by one of its callers: none may be
		// abandoned half-way by another's leaving.
		end := time.Now().Add(g.Timeout)
		if bounded && deadline.Before(end) {
			end = deadline
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		outs, err := g.Run(ctx, ins)
		cancel()
		for i, c := range batch {
			if err != nil {
				c.err = err
			} else {
				c.out = outs[i]
			}
			close(c.done)
		}
	}
}

// linger adds calls to batch as they arrive until it holds few, or until
// Linger has passed.
func (g *Group[In, Out]) linger(batch []*groupCall[In, Out], few int) []*groupCall[In, Out] {
	start := g.Timer
	if start == nil {
		start = StartTimer
	}
	expired, stop := start(g.Linger)
	defer stop()
	for len(batch) < few {
		select {
		case c, ok := <-g.calls:
			if !ok {
				return batch
			}
			batch = append(batch, c)
		case <-expired:
			return batch
		}
	}
	return batch
}

// StartTimer starts a real timer of d and returns its channel and its stop:
// the default of [Group.Timer], and of any bounded wait whose tests give a
// stand-in of this signature (internal/testutil/clocktest).
func StartTimer(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}
