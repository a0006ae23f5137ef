// Package jobs holds the River job args and workers: [BuyLabelWorker], which
// buys one label per intent, [SweepKeysWorker], which purges expired key
// records, and [VoidLabelWorker], which voids one carrier label that
// `reconcile void` asked for; [RetryPolicy] spaces the retries of unknown
// carrier outcomes.
//
// River's own guarantees are not enough for money: JobCompleteTx only checks
// that a job is running, not which attempt runs it, and the rescuer re-runs a
// job whose attempt merely stalled. Who may write an outcome is therefore
// decided by the lease on the key record (see package idempotency), and River's
// job timeout and rescue are derived from the lease (see [RiverTimings]).
package jobs
