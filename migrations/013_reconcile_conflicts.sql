-- 013: reconciliation never matches a line to another request's label by
-- carrier label id alone, and a void remembers every way an intent of ours
-- may still receive the carrier label (package reconcile).

-- A line whose carrier label id or tracking number is that of a label of
-- ours bought for another request than the one the line's reference or
-- carrier key names: not matched, reported. Placed before 'voided', with the
-- other discrepancies, in the order reports sort by.
ALTER TYPE reconcile_category ADD VALUE IF NOT EXISTS 'carrier_id_conflict' BEFORE 'voided';

-- The references and carrier keys of the invoice lines that bill a carrier
-- label asked to be voided (the plan reads them around the run's period):
-- the void job checks again, just before its carrier call, that no intent
-- they name is still pending. Constant defaults: adding them rewrites
-- nothing; a void asked for before has none, and the job checks its own
-- line's.
ALTER TABLE reconcile_voids
    ADD COLUMN claim_refs text[] NOT NULL DEFAULT '{}',
    ADD COLUMN claim_keys text[] NOT NULL DEFAULT '{}';
