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
// already waiting (up to max), and runs them together. Nothing waits for a
// batch to fill: under light load a call runs alone at once, and under heavy
// load the calls that arrive while the flushers are busy form the next
// batches. The flushers start on the first call and then idle on a channel for
// the life of the process.
type Group[In, Out any] struct {
	// Max bounds the calls of one batch; Flushers is how many batches may run
	// at once; Timeout bounds one run; Run does a batch, returning one output
	// per input, in order.
	Max      int
	Flushers int
	Timeout  time.Duration
	Run      func(ctx context.Context, ins []In) ([]Out, error)

	once  sync.Once
	calls chan *groupCall[In, Out]
}

type groupCall[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{}
}

// Do queues in and waits for its batch. A batch that fails fails each of its
// calls with the same error; callers then fall back to doing theirs alone.
func (g *Group[In, Out]) Do(in In) (Out, error) {
	g.once.Do(func() {
		g.calls = make(chan *groupCall[In, Out], g.Max*g.Flushers)
		for range g.Flushers {
			go g.flush()
		}
	})
	c := &groupCall[In, Out]{in: in, done: make(chan struct{})}
	g.calls <- c
	<-c.done
	return c.out, c.err
}

func (g *Group[In, Out]) flush() {
	batch := make([]*groupCall[In, Out], 0, g.Max)
	ins := make([]In, 0, g.Max)
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
		ins = ins[:0]
		for _, c := range batch {
			ins = append(ins, c.in)
		}
		// A batch is never cancelled by one of its callers: none may be
		// abandoned half-way by another's shutdown.
		ctx, cancel := context.WithTimeout(context.Background(), g.Timeout)
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
