-- 009: completion webhooks (docs/api.md, "Webhooks"). Package postgres owns
-- these tables: the completion statement writes webhook_events in the
-- transaction that completes the key.

-- One endpoint per caller. failures_in_row counts the events in a row whose
-- every attempt failed; WEBHOOK_DISABLE_AFTER of them, or one 410, disable
-- the endpoint, and `api webhook set` makes it active again.
CREATE TABLE webhook_endpoints (
    caller_id       text        PRIMARY KEY REFERENCES callers (caller_id),
    url             text        NOT NULL CHECK (url ~ '^https?://'),
    state           text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
    failures_in_row int         NOT NULL DEFAULT 0,
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The signing secrets of an endpoint, stored so that they can sign (an HMAC
-- key cannot be kept only as a hash): the raw bytes after whsec_, or, when
-- sealed, those bytes encrypted with WEBHOOK_SECRET_KEY (AES-256-GCM, the
-- caller bound in). A secret signs until expires_at; NULL is the newest,
-- which signs until the next rotation sets it to the rotation's time plus
-- WEBHOOK_ROTATION_OVERLAP.
CREATE TABLE webhook_secrets (
    secret_id  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    caller_id  text        NOT NULL REFERENCES webhook_endpoints (caller_id) ON DELETE CASCADE,
    secret     bytea       NOT NULL CHECK (length(secret) >= 24),
    sealed     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz
);
CREATE INDEX webhook_secrets_caller ON webhook_secrets (caller_id, secret_id);

-- One event per label request that became final while its caller had an
-- endpoint (the primary key makes a second impossible); event_id, derived
-- from the request id, is the webhook-id of every attempt. No foreign key:
-- the row is written by the completion, which holds the intent's row. dispatched_at: the relay made its River job.
-- state: pending until delivered or dropped (attempts exhausted, the
-- endpoint gone, disabled or deleted; drop_reason says which).
CREATE TABLE webhook_events (
    request_id    text        PRIMARY KEY,
    event_id      text        NOT NULL GENERATED ALWAYS AS ('msg_' || request_id) STORED,
    caller_id     text        NOT NULL,
    type          text        NOT NULL CHECK (type IN ('label_request.succeeded', 'label_request.failed')),
    created_at    timestamptz NOT NULL,
    dispatched_at timestamptz,
    state         text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dropped')),
    attempts      int         NOT NULL DEFAULT 0,
    last_status   int,
    last_error    text,
    drop_reason   text,
    finished_at   timestamptz
);

-- The relay's queue, as label_intents_undispatched: small, because
-- dispatched rows leave it at once.
CREATE INDEX webhook_events_undispatched ON webhook_events (created_at) WHERE dispatched_at IS NULL;
-- The oldest undelivered event (a metric), and the events a delete drops.
CREATE INDEX webhook_events_pending ON webhook_events (caller_id, created_at) WHERE state = 'pending';
-- The sweeper's: finished events, purged after TOMBSTONE_RETENTION.
CREATE INDEX webhook_events_finished ON webhook_events (finished_at) WHERE state <> 'pending';
