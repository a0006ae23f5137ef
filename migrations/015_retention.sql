-- 015: retention of the failed intents (docs/operations.md, Retention).
--
-- The sweeper deletes a failed intent INTENT_RETENTION after it failed, once
-- its key record is purged. Failed intents are a few in a hundred; the index
-- holds only them, so the purchases that succeed pay nothing for it.
-- Succeeded intents are not swept: each is the parcel's guard against a late
-- retry and its label's row refers to it.
CREATE INDEX label_intents_failed_completed_at ON label_intents (completed_at) WHERE status = 'failed';
