-- 008: voiding what reconciliation found (package reconcile, `reconcile void`).
--
-- Only package reconcile writes these tables (the void job of package jobs
-- records its outcomes through it); it reads labels, label_intents and
-- idempotency_keys, which belong to package postgres.

-- The invoice's optional charge_type column: '' for a charge (the column
-- absent, empty or "charge"), 'void_credit' for the credit of a voided label.
-- A constant default: adding the column rewrites nothing.
ALTER TABLE invoice_lines ADD COLUMN charge_type text NOT NULL DEFAULT '';

-- The void credits, a handful among millions of charges: a run finds the
-- credit of a carrier label whichever invoice carried it, through this index
-- alone (only credit lines enter it, so the import of charges does not pay
-- for it).
CREATE INDEX invoice_lines_void_credits ON invoice_lines (carrier_label_id) WHERE charge_type = 'void_credit';

-- A charge netted against the credit of its void, and the credit: a category
-- of their own, after the others (a new enum value goes last, which keeps the
-- report order of the others).
ALTER TYPE reconcile_category ADD VALUE IF NOT EXISTS 'voided';

-- One row per carrier label ever asked to be voided: the label is voided
-- once, whichever runs, operators and workers ask. outcome is NULL while the
-- void job has not answered; 'failed' is set back to NULL by a new request,
-- the other outcomes are final. void_key is the carrier Idempotency-Key of
-- the void (carrier.DeriveVoidKey), the same for every attempt.
CREATE TABLE reconcile_voids (
    carrier_label_id text        PRIMARY KEY CHECK (carrier_label_id <> ''),
    void_key         text        NOT NULL CHECK (length(void_key) BETWEEN 1 AND 255),
    -- The run and the invoice line (the charge voided) of the first request.
    run_id           bigint      NOT NULL,
    invoice_no       text COLLATE "C" NOT NULL,
    line_no          int         NOT NULL,
    category         text        NOT NULL CHECK (category IN ('duplicate_charge', 'billed_without_label')),
    charge_cents     bigint      NOT NULL,
    currency         text        NOT NULL,
    outcome          text        CHECK (outcome IN ('voided', 'window_closed', 'not_found', 'failed')),
    detail           text,
    -- The carrier's time of the void, and the amount it refunds (the label's cost).
    voided_at        timestamptz,
    credit_cents     bigint,
    -- Carrier calls made for the current request.
    attempts         int         NOT NULL DEFAULT 0,
    requested_at     timestamptz NOT NULL,
    answered_at      timestamptz,
    CHECK ((outcome = 'voided') = (voided_at IS NOT NULL))
);

-- The items of runs a void was asked for: the run's item (its invoice line)
-- and the carrier label whose outcome it reports. A label asked for by two
-- runs has one void and two rows here.
CREATE TABLE reconcile_void_items (
    run_id           bigint      NOT NULL,
    invoice_no       text COLLATE "C" NOT NULL,
    line_no          int         NOT NULL,
    carrier_label_id text        NOT NULL REFERENCES reconcile_voids (carrier_label_id),
    requested_at     timestamptz NOT NULL,
    PRIMARY KEY (run_id, invoice_no, line_no)
);

CREATE INDEX reconcile_void_items_carrier_label_id ON reconcile_void_items (carrier_label_id);
