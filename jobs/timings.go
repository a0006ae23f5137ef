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

// FetchPollInterval is how long River's producer waits for jobs when no
// insert notification comes (River's default is 1 s). A River client notifies
// at most once per queue per fetch cooldown (100 ms), so the relay's last
// inserts of a burst, made within 100 ms of a notification the producer has
// already answered, waited for that poll: a full second added to the tail of
// a burst of labels. A poll is one fetch query
// per worker process, a few a second when idle.
const FetchPollInterval = 200 * time.Millisecond

// QuietFetchPollInterval is how long River's producer of a quiet queue
// (river.QueueDefault, QueueMaintenance, QueueVoids: periodic jobs and
// operators' voids, whose inserts notify the producer anyway) waits for jobs
// when no insert notification comes: River's own default. Each queue's
// producer polls on its own, so at FetchPollInterval every quiet queue would
// add five fetch queries a second to an idle worker.
const QuietFetchPollInterval = time.Second
