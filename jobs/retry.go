package jobs

import (
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// RetryPolicy spaces retries exponentially with full jitter: the n-th retry
// waits a random time in [0, min(Max, Base·2^(n-1))).
type RetryPolicy struct {
	Base time.Duration
	Max  time.Duration
}

// NextRetry implements river.ClientRetryPolicy. It counts the errors the job
// has recorded, so snoozes (a lease held elsewhere) do not lengthen the delays.
func (p *RetryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(p.Delay(len(job.Errors) + 1))
}

// Delay returns the jittered delay before retry n (n ≥ 1).
func (p *RetryPolicy) Delay(n int) time.Duration {
	ceiling := p.Max
	if n < 63 {
		if d := p.Base << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling)))
}
