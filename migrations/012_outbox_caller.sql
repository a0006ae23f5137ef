-- 012: the relay's queue knows each intent's caller, so that the relay can
-- take the callers in turn instead of the oldest intents first.
--
-- Oldest first, one caller's burst of 10,000 keys went into River ahead of
-- every other caller's next intent, and River runs a queue in order: the
-- other callers waited for the whole burst. The relay now takes each
-- caller's oldest intents in turns (the first of every caller, then the
-- second, ...) and moves no more into River than a bounded backlog
-- (outbox.Relay, postgres.DispatchIntents): the rest of a burst waits here,
-- where the next batch can still put another caller's intent before it.
--
-- The index gives the relay each caller's oldest intents, and the distinct
-- callers by a skip scan, without reading the whole queue.
--
-- An api older than this migration stores its intents' rows without a
-- caller: they get '' and are taken as one caller among the others until
-- every api runs a version with it. Adding a column with a constant default
-- rewrites nothing; the queue's few rows get their callers here.
ALTER TABLE label_intent_outbox ADD COLUMN caller_id text NOT NULL DEFAULT '';

UPDATE label_intent_outbox o SET caller_id = i.caller_id
  FROM label_intents i
 WHERE i.request_id = o.request_id;

CREATE INDEX label_intent_outbox_caller ON label_intent_outbox (caller_id, created_at, request_id);
