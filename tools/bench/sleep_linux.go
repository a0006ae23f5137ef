package main

import (
	"syscall"
	"time"
)

// preciseSleep sleeps d with nanosleep(2), a high-resolution timer of the
// calling thread (the caller locks it), rather than through the Go runtime's
// timers, which wake from the network poller with millisecond resolution.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
