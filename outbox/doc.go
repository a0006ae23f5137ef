// Package outbox runs the relays: the [Relay] that turns the accepted intents
// queued in label_intent_outbox into River buy_label jobs, and, built by
// [NewEventRelay], the one that turns the webhook events the completion
// writes (webhook_events) into deliver_webhook jobs.
//
// The intent relay takes the callers in turns, and only as many intents as
// keep River's queue, which runs in order, at a bounded backlog, so that one
// caller's burst waits in the outbox behind the next intent of every other
// caller (docs/design.md, "Fair share between callers"). Each take is one
// transaction: the rows leave the queue and their jobs (unique by request id)
// are inserted together, or neither. The tables and their statements
// (postgres.DispatchIntents, postgres.DispatchWebhookEvents) live in package
// postgres; the label_intents rows themselves are written by the accept and
// finalised by the completion.
package outbox
