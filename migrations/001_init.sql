-- 001: callers, the key record, the label-intent outbox and labels.
--
-- Every table that holds caller data carries caller_id: everything is scoped per
-- caller (api.md), and it is the column a distributed deployment would shard on.

CREATE TABLE callers (
    caller_id  text        PRIMARY KEY CHECK (caller_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a bearer token is stored.
CREATE TABLE caller_tokens (
    token_hash bytea       PRIMARY KEY CHECK (length(token_hash) = 32),
    caller_id  text        NOT NULL REFERENCES callers (caller_id),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TYPE idempotency_state AS ENUM ('started', 'completed');

-- The key record of the seed: one row per (caller, key). It is written together
-- with its label intent in one transaction, leased by the worker attempt that
-- calls the carrier, completed together with the label, and purged by the
-- sweeper once expires_at has passed.
CREATE TABLE idempotency_keys (
    caller_id           text              NOT NULL,
    idem_key            text              NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
    request_hash        bytea             NOT NULL CHECK (length(request_hash) = 32),
    fingerprint_version smallint          NOT NULL,
    request_id          text              NOT NULL,
    state               idempotency_state NOT NULL DEFAULT 'started',
    locked_until        timestamptz,
    lease_token         uuid,
    response_status     int,
    -- json, not jsonb: replays are byte-for-byte the body saved at completion,
    -- and jsonb would reorder members and rewrite whitespace.
    response_body       json,
    created_at          timestamptz       NOT NULL,
    expires_at          timestamptz       NOT NULL,
    PRIMARY KEY (caller_id, idem_key),
    CHECK ((state = 'completed') = (response_status IS NOT NULL AND response_body IS NOT NULL))
);

-- The sweeper's range scan. Only completed keys are ever purged.
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at) WHERE state = 'completed';

-- The label-intent outbox: one row per accepted intent. The relay turns
-- undispatched rows into River jobs; the worker marks them final.
CREATE TABLE label_intents (
    request_id          text        PRIMARY KEY,
    caller_id           text        NOT NULL,
    idem_key            text        NOT NULL,
    request_hash        bytea       NOT NULL CHECK (length(request_hash) = 32),
    fingerprint_version smallint    NOT NULL,
    order_id            bigint      NOT NULL CHECK (order_id > 0),
    parcel_no           int         NOT NULL CHECK (parcel_no BETWEEN 1 AND 999),
    label_version       int         NOT NULL CHECK (label_version BETWEEN 1 AND 99),
    -- The validated, canonical request body: what the worker sends on.
    payload             jsonb       NOT NULL,
    carrier_key         text        NOT NULL CHECK (length(carrier_key) BETWEEN 1 AND 255),
    status              text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
    label_id            text,
    -- Carrier calls made for this intent so far; MAX_ATTEMPTS bounds it.
    attempts            int         NOT NULL DEFAULT 0,
    -- The saved problem of an intent that failed for good.
    error               json,
    created_at          timestamptz NOT NULL,
    dispatched_at       timestamptz,
    completed_at        timestamptz,
    CHECK ((status = 'pending') = (completed_at IS NULL)),
    CHECK ((status = 'succeeded') = (label_id IS NOT NULL)),
    CHECK ((status = 'failed') = (error IS NOT NULL))
);

-- The natural key: at most one pending or succeeded intent per parcel and
-- version. A failed intent does not block its parcel.
CREATE UNIQUE INDEX label_intents_natural_key
    ON label_intents (caller_id, order_id, parcel_no, label_version)
    WHERE status IN ('pending', 'succeeded');

-- GET /v1/label-requests?idempotency_key=K, and the lookup after a key is purged.
CREATE INDEX label_intents_caller_key ON label_intents (caller_id, idem_key);

-- The relay's queue: small, because dispatched rows leave it at once.
CREATE INDEX label_intents_undispatched ON label_intents (created_at) WHERE dispatched_at IS NULL;

-- Intents not yet final, for the stuck-intent report and the age metric.
CREATE INDEX label_intents_pending ON label_intents (created_at) WHERE status = 'pending';

CREATE TABLE labels (
    label_id         text        PRIMARY KEY,
    caller_id        text        NOT NULL,
    request_id       text        NOT NULL UNIQUE REFERENCES label_intents (request_id),
    order_id         bigint      NOT NULL,
    parcel_no        int         NOT NULL,
    label_version    int         NOT NULL,
    service          text        NOT NULL,
    tracking_no      text        NOT NULL,
    carrier_label_id text        NOT NULL,
    carrier_key      text        NOT NULL,
    cost_cents       bigint      NOT NULL,
    currency         text        NOT NULL,
    created_by_key   text        NOT NULL,
    purchased_at     timestamptz,
    created_at       timestamptz NOT NULL,
    -- The second line of defence: one label per parcel and version.
    CONSTRAINT labels_natural_key UNIQUE (caller_id, order_id, parcel_no, label_version)
);

CREATE INDEX labels_created_at ON labels (created_at);
CREATE INDEX labels_carrier_key ON labels (carrier_key);
CREATE INDEX labels_carrier_label_id ON labels (carrier_label_id);
CREATE INDEX labels_tracking_no ON labels (tracking_no);
