package accept

import (
	"hash/maphash"
	"sync/atomic"
)

// Which creates read their key record before the insert. This is the
// accept's one performance setting; docs/benchmarks.md gives the figure that
// keeps it.
//
// A read first answers a repeat at once from what is stored: it waits for no
// commit and writes nothing, so the repeat is answered even while writes wait
// (a lock, a failover). For a new key it is a round trip and a query for
// nothing: the insert finds an existing key by itself (ON CONFLICT DO
// NOTHING) and the accept answers from a read after it. Both ways answer from
// the same stored rows, so the choice changes how long an answer takes, never
// what it is. The read goes first for a key this process accepted or
// answered lately (the retries of a client whose answer was lost come back to
// the instance that took the key, within seconds to minutes), and for every
// key while more than one in eight of the keys it had not seen turn out to be
// stored (a replay storm after a restart, or retries another instance took
// first).

// recentKeys is how many keys the table of keys seen lately holds (8 B each:
// 2 MiB). At the seed's peak of 2,000 creates/s it spans about two minutes; a
// key pushed out by another only costs its repeat the wait for a commit.
const recentKeys = 1 << 18

// window is how many creates of keys not seen lately make one estimate of the
// share of them that were stored; readAllAbove is the share over which every
// key reads first. A stored key sent to the insert waits for a shared
// transaction (a commit) before its read; read first, every new key pays one
// more round trip, a few times cheaper: the two cost the same near one in
// eight.
const (
	window       = 256
	readAllAbove = window / 8
)

// recent is a lossy set of (caller, key) hashes and the running estimate,
// shared by every request without a lock.
type recent struct {
	seed  maphash.Seed
	slots []atomic.Uint64
	// counts packs the current window: creates of unseen keys in the low 32
	// bits, how many of them were stored in the high 32.
	counts  atomic.Uint64
	readAll atomic.Bool
}

func newRecent() *recent {
	return &recent{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, recentKeys)}
}

func (r *recent) hash(callerID, key string) uint64 {
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(callerID)
	h.WriteByte(0)
	h.WriteString(key)
	return h.Sum64() | 1 // 0 is an empty slot
}

// decide says whether the create of (callerID, key) reads first, and whether
// the key was not seen lately (its outcome then goes to the estimate, see
// observe). It records the key as seen.
func (r *recent) decide(callerID, key string) (read, unseen bool) {
	v := r.hash(callerID, key)
	slot := &r.slots[v%recentKeys]
	if slot.Load() == v {
		return true, false
	}
	slot.Store(v)
	return r.readAll.Load(), true
}

// observe counts the create of an unseen key, stored before it or not; the
// create that fills a window sets readAll from it and starts the next.
func (r *recent) observe(stored bool) {
	add := uint64(1)
	if stored {
		add |= 1 << 32
	}
	c := r.counts.Add(add)
	if uint32(c) != window {
		return
	}
	r.counts.Add(^(c - 1)) // minus c: what others added since stays
	r.readAll.Store(c>>32 > readAllAbove)
}
