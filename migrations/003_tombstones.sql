-- 003: tombstones of purged keys.
--
-- The seed: "Alert on requests that arrive with a key the server has already
-- purged; each one is a possible duplicate." When the sweeper deletes a
-- completed key it leaves a compact tombstone (caller, SHA-256 of the key,
-- purge time; about 100 bytes with its index entry instead of ~500). A request
-- whose new key matches a tombstone is still treated as new, as the seed says,
-- but is logged and counted; its parcel stays protected by the natural key.
-- Tombstones are themselves purged after TOMBSTONE_RETENTION (default 30 days).
CREATE TABLE idempotency_tombstones (
    caller_id text        NOT NULL,
    key_hash  bytea       NOT NULL CHECK (length(key_hash) = 32),
    purged_at timestamptz NOT NULL,
    PRIMARY KEY (caller_id, key_hash)
);

CREATE INDEX idempotency_tombstones_purged_at ON idempotency_tombstones (purged_at);
