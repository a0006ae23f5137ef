// Package clocktest stands in for timers in tests, so that a bounded wait
// ends when the test says and never races the code under test.
package clocktest

import "time"

// Timer is a timer's stand-in: Started receives the duration of each timer
// started, and every timer started expires only when the test calls Expire.
type Timer struct {
	Started chan time.Duration
	expire  chan time.Time
}

// NewTimer returns a Timer that records up to 16 starts not yet received.
func NewTimer() *Timer {
	return &Timer{Started: make(chan time.Duration, 16), expire: make(chan time.Time)}
}

// Start starts a timer of d: its signature is that of the Timer fields of
// the code under test (internal/group's Group.Timer).
func (f *Timer) Start(d time.Duration) (<-chan time.Time, func()) {
	f.Started <- d
	return f.expire, func() {}
}

// Expire makes one waiting timer expire; it blocks until one waits.
func (f *Timer) Expire() { f.expire <- time.Time{} }
