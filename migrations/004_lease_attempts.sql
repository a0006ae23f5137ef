-- 004: the carrier attempts are counted on the key record, beside the lease.
--
-- An attempt takes the key's lease and counts itself in the same update, so
-- the lease writes one row, not two: counted on the intent, every lease also
-- rewrote the intent (its payload included) and, that update not being HOT,
-- an entry in each of the intent's indexes.
--
-- Like the lease, the count only matters while the key is started: NULL
-- before the first attempt and again once the key is completed, so that a
-- completed key, almost every row of the table, stores no byte of it (a
-- NULL costs a bit of the null bitmap the row already has; a value would
-- cost 8 bytes after alignment, one row in 19 of every page).
ALTER TABLE idempotency_keys ADD COLUMN attempts int CHECK (attempts > 0);

UPDATE idempotency_keys k
   SET attempts = i.attempts
  FROM label_intents i
 WHERE i.request_id = k.request_id AND k.state = 'started' AND i.attempts > 0;

ALTER TABLE label_intents DROP COLUMN attempts;

-- No query reads labels by carrier key (reconciliation matches it in its
-- scratch copy of the period's labels, docs/reconcile.md); the index cost
-- every label an entry.
DROP INDEX labels_carrier_key;
