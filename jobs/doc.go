// Package jobs holds the River job args and workers:
//
//   - [BuyLabelWorker] buys one label per intent;
//   - [DeliverWebhookWorker] delivers one webhook event, with at most
//     WEBHOOK_ENDPOINT_CONCURRENCY attempts in flight per endpoint in the
//     process (a delivery past that is snoozed without an attempt counted);
//   - [SweepKeysWorker] purges expired key records, then each table of
//     [RetainedTables] past its retention (tombstones, finished webhook
//     events, failed intents, reconciliation runs and invoice lines; labels
//     with their intents only with a LabelRetention), and its
//     own finished sweep_keys jobs;
//   - [ReconcileWorker] runs the scheduled reconciliation
//     (RECONCILE_SCHEDULE);
//   - [VoidLabelWorker] voids one carrier label that `reconcile void` asked
//     for ([EnqueueVoids] is how `reconcile void` inserts those jobs).
//
// [RetryPolicy] spaces the retries of unknown carrier outcomes, and
// [InsertByID] inserts one job per id in the caller's transaction (the
// relays of package outbox use it).
//
// River's own guarantees are not enough for money: JobCompleteTx only checks
// that a job is running, not which attempt runs it, and the rescuer re-runs a
// job whose attempt merely stalled. Who may write an outcome is therefore
// decided by the lease on the key record (postgres.TakeLeases,
// postgres.Complete), and River's job timeout and rescue are derived from
// the lease (see [RiverTimings]).
package jobs
