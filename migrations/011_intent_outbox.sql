-- 011: the relay's queue is a narrow table of its own.
--
-- A row here is an intent that is accepted and not yet dispatched, and
-- nothing else: the accept inserts it in the statement that stores the
-- intent, and the relay deletes it in the transaction that inserts the
-- intent's River job. So an intent is dispatched once, and a crash between
-- the two leaves the row for the next relay.
--
-- The queue was label_intents.dispatched_at with a partial index on
-- dispatched_at IS NULL. Marking an intent changed that predicate's column,
-- so the mark could never be a HOT update: it wrote a new version of the whole
-- intent row (the payload included) and an entry in every index of
-- label_intents. Deleting a row of two columns writes neither.
--
-- An api older than this migration stores intents without a row here. Once
-- every api runs a version with it, queue what they stored; an intent queued
-- twice still gets one job (jobs are unique by request id), and a pending
-- intent with no job is exactly what the relay is for:
--   INSERT INTO label_intent_outbox (created_at, request_id)
--   SELECT created_at, request_id FROM label_intents WHERE status = 'pending'
--   ON CONFLICT DO NOTHING;
CREATE TABLE label_intent_outbox (
    created_at timestamptz NOT NULL,
    request_id text        NOT NULL,
    -- The relay takes the oldest first; the metric of its lag reads the first.
    PRIMARY KEY (created_at, request_id)
);

INSERT INTO label_intent_outbox (created_at, request_id)
SELECT created_at, request_id FROM label_intents WHERE dispatched_at IS NULL;

DROP INDEX label_intents_undispatched;
ALTER TABLE label_intents DROP COLUMN dispatched_at;
