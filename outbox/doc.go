// Package outbox is the hop from the outbox tables into River: the [Relay]
// that turns the accepted intents queued in label_intent_outbox into River
// buy_label jobs, and, built by [NewEventRelay], the one that turns the
// webhook events the completion writes (webhook_events) into deliver_webhook
// jobs.
//
// Each take is one transaction, owned here end to end: the relay opens it,
// runs its take statement, inserts the rows' jobs through River
// (InsertManyTx, with the args of package jobs, unique by request id) and
// commits: the rows leave the queue and their jobs are inserted together, or
// neither. The intent relay takes the callers in turns, and only as many
// intents as keep River's queue, which runs in order, at a bounded backlog,
// so that one caller's burst waits in the outbox behind the next intent of
// every other caller (docs/design.md, "Fair share between callers").
//
// Which package owns which statement on these tables:
//
//   - label_intent_outbox: the accept inserts a row beside its intent, in
//     postgres.Accept's statement; the take here (sqlDispatch) deletes the
//     rows it dispatches, and reads river_job, River's table, for the count
//     of its backlog only; the store gauges (postgres.GetStoreStats) read the
//     age of the oldest row.
//   - webhook_events: the completion inserts a row, in postgres.Complete's
//     statement; the take here (sqlDispatchEvents) marks the rows it
//     dispatches (dispatched_at); every other statement on it (a delivery's
//     attempts, the drops, the purge, the gauges) is in package postgres.
//
// The intents themselves (label_intents) are written by the accept and
// finalised by the completion, in package postgres.
package outbox
