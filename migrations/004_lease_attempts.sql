-- 004: the carrier attempts are counted on the key record, beside the lease.
--
-- An attempt takes the key's lease and counts itself in the same update, so
-- the lease writes one row, not two: counted on the intent, every lease also
-- rewrote the intent (its payload included) and, that update not being HOT,
-- an entry in each of the intent's indexes (docs/bench.md, "The night").
-- Only a started key has attempts that matter; a purged key was completed.
ALTER TABLE idempotency_keys ADD COLUMN attempts int NOT NULL DEFAULT 0;

UPDATE idempotency_keys k
   SET attempts = i.attempts
  FROM label_intents i
 WHERE i.request_id = k.request_id AND k.state = 'started' AND i.attempts > 0;

ALTER TABLE label_intents DROP COLUMN attempts;

-- No query reads labels by carrier key (reconciliation matches it in its
-- scratch copy of the period's labels, docs/reconcile.md); the index cost
-- every label an entry.
DROP INDEX labels_carrier_key;
