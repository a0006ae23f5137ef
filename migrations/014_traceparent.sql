-- 014: a purchase's trace crosses the async hop (docs/operations.md,
-- Tracing). With tracing on, the accept stores the W3C traceparent of its
-- span with the intent's row of the relay's queue, which the relay puts in
-- the job's metadata; the completion stores the job's with the webhook
-- event, whose delivery links to it. Off, both stay NULL. Nullable columns
-- without a default rewrite nothing.
ALTER TABLE label_intent_outbox ADD COLUMN traceparent text;
ALTER TABLE webhook_events ADD COLUMN traceparent text;
