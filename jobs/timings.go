package jobs

import "time"

// RescuerInterval is how often River's rescuer looks for stuck jobs.
const RescuerInterval = 30 * time.Second

// RiverTimings derives River's job timeout and stuck-job rescue from the lease,
// so that a crashed or stalled attempt is taken over within lease + 45 s:
// the job times out with its lease, the rescuer considers it stuck 15 s later
// (when the lease has certainly expired, so the next attempt can take it over),
// and the rescuer runs every 30 s.
func RiverTimings(lease time.Duration) (jobTimeout, rescueAfter time.Duration) {
	return lease, lease + 15*time.Second
}
