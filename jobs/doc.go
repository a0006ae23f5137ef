// Package jobs holds the River job args and workers: [BuyLabelWorker], which
// buys one label per intent, [DeliverWebhookWorker], which delivers one
// webhook event (at most WEBHOOK_ENDPOINT_CONCURRENCY attempts in flight per
// endpoint in the process; a delivery past that is snoozed without an
// attempt counted), [SweepKeysWorker], which purges expired key records,
// tombstones and finished webhook events, [ReconcileWorker], which runs the
// scheduled reconciliation (RECONCILE_SCHEDULE), and [VoidLabelWorker], which
// voids one carrier label that `reconcile void` asked for; [RetryPolicy] spaces the retries of unknown carrier outcomes.
//
// River's own guarantees are not enough for money: JobCompleteTx only checks
// that a job is running, not which attempt runs it, and the rescuer re-runs a
// job whose attempt merely stalled. Who may write an outcome is therefore
// decided by the lease on the key record (postgres.TakeLeases,
// postgres.Complete), and River's
// job timeout and rescue are derived from the lease (see [RiverTimings]).
package jobs
