// Package postgres owns the pipeline's tables: callers, caller_tokens,
// idempotency_keys, idempotency_tombstones, label_intents and labels, and the
// webhook tables (webhook_endpoints, webhook_secrets, webhook_events), whose
// events the completion writes. Every statement that reads or writes them is
// here, but for the relays' takes and for package reconcile, which reads
// labels, key records and intents for its report and its voids, and owns its
// own tables.
//
// The two outbox tables are shared with package outbox, the hop into River:
// here, the accept's statement ([Accept]) inserts each stored intent's row of
// label_intent_outbox, and the completion's ([Complete]) the row of
// webhook_events; in package outbox, the relays' take statements delete the
// rows of label_intent_outbox they dispatch and mark those of webhook_events
// dispatched, in the transaction that inserts their River jobs. Every other
// statement on webhook_events (a delivery's attempts, the drops, the purge)
// is here.
//
// A state change is one statement over arrays (unnest) that returns an
// outcome per row:
//
//	[Accept]    key record + pending intent, or why not (key exists, parcel taken, busy)
//	[TakeLeases] the key's lease for one attempt, or why not (final, held, busy, gone)
//	[Complete]  label + completed key + final intent (+ webhook event), only under the attempt's lease
//	[Release]   the lease given back after an unknown carrier outcome
//	[Purge]     completed keys past expires_at, leaving tombstones
//
// An outcome is a named constant ([AcceptResult], [LeaseResult],
// [CompleteResult]); the statements select it as the constant's number,
// written into their text from the constant itself.
//
// Callers with one row pass a slice of one; callers with many (the group
// commit of package accept and of the buy-label worker) pass them all, and
// each row gets the outcome it would have had alone. The statements that can
// meet a row another session holds either skip it (SKIP LOCKED: the row's
// outcome says busy), do without it ([Accept] answers a stored key or parcel
// from its snapshot, and a key or parcel another accept has claimed and not
// committed is busy), or wait at most a lock_timeout, so one stuck session
// delays only the rows it holds.
//
// [GetStoreStats] reads the figures of the store gauges (package metrics):
// the pending intents and the outbox, and, for their counts only, river_job
// and package reconcile's reconcile_runs; [GetWebhookStats] those of the
// webhook gauges (the oldest undelivered event, the disabled endpoints).
//
// Every time written to or compared with these rows is the database's:
// the statements use now() (the transaction's start), never a time a process
// sends: created_at of keys, intents, the outbox and labels, completed_at,
// expires_at, locked_until, purged_at and the webhook tables' times, and the
// purges, the leases and the secrets' expiry compare with now(). [ClockSkew]
// measures how far a process clock, which still schedules River's retries,
// is from it.
//
// [Unavailable] classifies this package's errors: the database cannot be
// reached or is overloaded (retry the same request), or the statement failed.
package postgres
