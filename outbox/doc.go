// Package outbox owns the label-intent outbox (table label_intents): one row
// per accepted intent, written in the accept transaction together with its key
// record and its row of the relay's queue (table label_intent_outbox), and the
// [Relay] that turns the queued intents into River jobs: the callers in
// turns, and only as many as keep River's queue, which runs in order, at a
// bounded backlog, so that one caller's burst waits in the outbox behind the
// next intent of every other caller (docs/design.md, "Fair share between
// callers").
//
// An intent moves pending → succeeded | failed, exactly once. Its natural key
// (caller_id, order_id, parcel_no, label_version) is unique among pending and
// succeeded intents: the second line of defence behind the idempotency key.
// Intents are kept after their key record is purged, so the natural key keeps
// protecting late retries and the intent keeps its fingerprint.
//
// The same relay, built by [NewEventRelay], turns the webhook events the
// completion writes (table webhook_events) into deliver_webhook jobs.
package outbox
