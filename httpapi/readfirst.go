package httpapi

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// ReadFirst says when a create reads its key record before it goes on to the
// shared accept transaction.
//
// The read answers a repeat at once, without waiting for any commit, but it
// is a round trip that a new key pays for nothing: the shared insert finds a
// key that is already there by itself (ON CONFLICT DO NOTHING), stores
// nothing for it, and the accept answers from a read after the insert
// (acceptShared). Both ways answer from what is stored, so the choice changes
// only how long an answer takes, never what it is.
type ReadFirst int

const (
	// ReadFirstAdaptive reads first for a key this process has taken lately
	// (a retry of a request it answered), and for every key while many of
	// the keys it had not seen turn out to be stored (replays after a
	// restart, or retries that another instance took first). The default.
	ReadFirstAdaptive ReadFirst = iota
	// ReadFirstAlways reads every key first.
	ReadFirstAlways
	// ReadFirstNever sends every key to the insert: each repeat is answered
	// after a shared transaction. For tests of that path.
	ReadFirstNever
)

// recentKeys is how many keys the table of keys seen lately holds (8 B each:
// 2 MiB). At the seed's peak of 2,000 creates/s it spans about two minutes,
// in which a timed-out client's retries come; a key pushed out by another
// only costs its repeat the wait for a shared transaction.
const recentKeys = 1 << 18

// window is how many creates of keys not seen lately make one estimate of the
// share of them that were stored; readAllAbove is the share over which every
// key reads first. A stored key sent to the insert waits for a shared
// transaction (a commit, about 1-2 ms on the bench machine) before its read;
// read first, every new key pays one more round trip (about 0.2 ms), so the
// two cost the same near a share of one in eight.
const (
	window       = 256
	readAllAbove = window / 8
)

// readFirstPolicy decides, per create, whether to read first. It is shared
// by every request: the table is a lossy hash set of atomics, and the
// estimate is a counter that the create closing a window resets.
type readFirstPolicy struct {
	mode ReadFirst
	seed maphash.Seed
	seen []atomic.Uint64
	// counts packs the current window: creates of unseen keys in the low 32
	// bits, how many of them were stored in the high 32.
	counts  atomic.Uint64
	readAll atomic.Bool
	gauge   prometheus.Gauge // readAll as 0 or 1
}

func newReadFirstPolicy(mode ReadFirst, readAll prometheus.Gauge) *readFirstPolicy {
	p := &readFirstPolicy{mode: mode, seed: maphash.MakeSeed(), gauge: readAll}
	if mode == ReadFirstAdaptive {
		p.seen = make([]atomic.Uint64, recentKeys)
	}
	return p
}

// decide says whether the create of key reads first, and whether the key was
// not seen lately (its outcome then goes to the estimate, see observe). It
// records the key as seen.
func (p *readFirstPolicy) decide(callerID, key string) (read, unseen bool) {
	switch p.mode {
	case ReadFirstAlways:
		return true, false
	case ReadFirstNever:
		return false, false
	}
	var h maphash.Hash
	h.SetSeed(p.seed)
	h.WriteString(callerID)
	h.WriteByte(0)
	h.WriteString(key)
	v := h.Sum64() | 1 // 0 is an empty slot
	slot := &p.seen[v%recentKeys]
	if slot.Load() == v {
		return true, false
	}
	slot.Store(v)
	return p.readAll.Load(), true
}

// observe counts the create of an unseen key, stored before it or not; the
// create that fills a window sets readAll from it and starts the next.
func (p *readFirstPolicy) observe(stored bool) {
	add := uint64(1)
	if stored {
		add |= 1 << 32
	}
	c := p.counts.Add(add)
	if uint32(c) != window {
		return
	}
	p.counts.Add(^(c - 1)) // minus c: what others added since stays
	all := c>>32 > readAllAbove
	p.readAll.Store(all)
	v := 0.0
	if all {
		v = 1
	}
	p.gauge.Set(v)
}
