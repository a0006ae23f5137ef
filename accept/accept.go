// Package accept is the seed's accept algorithm, with the purchase left to a
// worker: for one POST /v1/labels it fingerprints the validated parcel,
// derives the carrier key, and in one transaction stores the key record and
// the label-intent outbox row, or finds what already answers the request (a
// repeat of the key, or another key's intent for the same parcel). A repeat
// of a key this process took lately is answered from a read before any
// write (recent.go). Accepts
// that arrive together share that transaction (group commit); each gets the
// decision it would have had alone. The shared transaction waits for no
// other session: a row it cannot store without waiting (another accept of
// its key or parcel has not committed) is tried again alone in its own
// request, which waits up to the claim wait while the shared transactions
// go on.
//
// It decides; it does not render. Package httpapi maps a [Decision] to a
// status and a body.
package accept

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/attribute"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/group"
	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/postgres"
)

// Outcome names what the accept found or did. The values are those of the
// metric labels_idempotency_outcomes_total.
type Outcome string

// The outcomes of an accept.
const (
	// Accepted: the key record and the intent are stored; a worker will buy the label.
	Accepted Outcome = "new"
	// Replayed: the key exists with the same fingerprint; its answer is replayed.
	Replayed Outcome = "replayed"
	// KeyReused: the key exists with another fingerprint (422).
	KeyReused Outcome = "key_reused"
	// Duplicate: a new key for a parcel and version that already have an
	// intent with the same fingerprint: answered as a repeat of that intent,
	// nothing stored under the new key.
	Duplicate Outcome = "duplicate_intent"
	// ParcelLabelled: a new key for a parcel and version that already have an
	// intent with another fingerprint (409 parcel_already_labelled).
	ParcelLabelled Outcome = "parcel_already_labelled"
)

// Decision is what an accept found or did.
type Decision struct {
	Outcome Outcome
	// Intent is the intent the answer is about: the new one, the key's, or
	// the one holding the parcel. Nil for KeyReused and for the replay of a
	// completed key.
	Intent *postgres.Intent
	// Key is the stored key record, for Replayed and KeyReused.
	Key *postgres.Key
	// PurgedKey says the key matched a tombstone: it was completed and
	// purged before, and arrives again (a possible duplicate: retention may
	// be shorter than the retry horizon). The parcel is still protected by
	// the natural key.
	PurgedKey bool
}

// Completed says the decision replays a completed key's saved response.
func (d *Decision) Completed() bool {
	return d.Key != nil && d.Key.State == postgres.StateCompleted && d.Outcome == Replayed
}

// ErrInProgress says a concurrent request with the same key (or, under
// another key, for the same parcel) held its claim longer than the claim
// wait, or the parcel's intent changed under the request: the caller should
// retry with the same key (409 request_in_progress).
var ErrInProgress = errors.New("accept: a concurrent request with the same key holds its claim")

// Opts configures an [Accepter].
type Opts struct {
	Pool *pgxpool.Pool
	// Notifier wakes the relays after a commit; nil means they poll.
	Notifier *notify.Notifier
	// KeyRetention sets expires_at of a started record (default
	// [idempotency.DefaultKeyRetention]), from the database's clock; the
	// completion sets it again.
	KeyRetention time.Duration
	// ClaimWait bounds the wait for a concurrent request with the same key
	// or parcel to commit its claim (default [DefaultClaimWait]). Only a request tried alone
	// waits for a claim; a shared transaction meets this bound only in the
	// rare case that it waits for a lock anyway, and then hands its rows
	// back to be tried alone.
	ClaimWait time.Duration
	// Batch bounds how many accepts share one transaction (ACCEPT_BATCH; 0:
	// [DefaultBatch]); a negative value (or 1) gives each accept a
	// transaction of its own.
	Batch int
	// Linger bounds how long a shared transaction waits for more accepts
	// when the last one held fewer than [LingerFew] (ACCEPT_LINGER; 0:
	// [DefaultLinger]; negative: never waits). At a moderate rate it
	// lets a few accepts share each commit instead of one or two, for at
	// most this much more latency; at saturation the batches are full
	// and nothing waits.
	Linger time.Duration
	// Timeout bounds one shared transaction (default [DefaultTimeout]); the
	// HTTP API bounds each request's database work by it too.
	Timeout time.Duration
	// BeforeCommitFunc, when set, runs inside each accept's transaction
	// after its rows are written; an error aborts it. Accepts then do not
	// share transactions. For fault-injection tests.
	BeforeCommitFunc func(ctx context.Context) error
}

// Accepter accepts label requests.
type Accepter struct {
	opts   Opts
	shared *group.Group[postgres.AcceptRow, rowResult] // nil: every accept alone
	recent *recent                                     // keys taken lately: read first
}

// Defaults of [Opts].
const (
	DefaultClaimWait = 2 * time.Second
	DefaultBatch     = 64                   // ACCEPT_BATCH
	DefaultLinger    = 2 * time.Millisecond // ACCEPT_LINGER
	DefaultTimeout   = 5 * time.Second
)

// LingerFew is the batch below which the next shared transaction lingers
// (see [Opts.Linger]), and the batch that ends a linger.
const LingerFew = 8

// WithDefaults returns o with each zero field (a negative duration too,
// but Linger's, which is "none") set to its default.
func (o Opts) WithDefaults() Opts {
	if o.KeyRetention <= 0 {
		o.KeyRetention = idempotency.DefaultKeyRetention
	}
	if o.ClaimWait <= 0 {
		o.ClaimWait = DefaultClaimWait
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// New returns an Accepter.
func New(opts Opts) *Accepter {
	opts = opts.WithDefaults()
	a := &Accepter{opts: opts, recent: newRecent()}
	if opts.Batch > 1 && opts.BeforeCommitFunc == nil {
		// One flusher: fewer, larger batches and fewer concurrent WAL
		// flushes; a batch is one round trip (see docs/benchmarks.md).
		a.shared = &group.Group[postgres.AcceptRow, rowResult]{Max: opts.Batch, Flushers: 1, Timeout: opts.Timeout, Run: a.acceptMany,
			Linger: max(opts.Linger, 0), LingerFew: LingerFew}
	}
	return a
}

// Fingerprint is the request fingerprint of a create: SHA-256 over the
// method, the route and the canonical body (defaults applied).
func Fingerprint(parcel labels.Parcel) ([]byte, error) {
	canonical, err := idempotency.Canonical(parcel)
	if err != nil {
		return nil, err
	}
	return idempotency.Fingerprint("POST", "/v1/labels", canonical), nil
}

// Accept runs the algorithm for one validated request of callerID under key.
// An error is the store's (the request was not carried out, unless a retry
// finds it stored), or [ErrInProgress].
//
// With tracing on, the accept is a span, and what it stores carries its
// traceparent (the relay continues the trace from there).
func (a *Accepter) Accept(ctx context.Context, callerID, key string, parcel labels.Parcel) (*Decision, error) {
	ctx, span := tracing.Start(ctx, "accept")
	defer span.End()
	hash, err := Fingerprint(parcel)
	if err != nil {
		return nil, err
	}
	// A key this process took lately is read first, and every key during a
	// replay storm (recent.go): its repeat is answered from what is stored,
	// waiting for no commit and writing nothing. Any other key goes to the
	// insert, which finds a stored key by itself; the answer is then read
	// after it.
	read, unseen := a.recent.decide(callerID, key)
	if read {
		if d, err := a.repeat(ctx, callerID, key, hash); d != nil || err != nil {
			return d, err
		}
	}
	// A key found existing but gone before it could be read was purged in
	// between: the accept starts over, once.
	for range 2 {
		row := a.row(callerID, key, parcel, hash)
		row.Intent.Traceparent = tracing.Traceparent(ctx)
		out, err := a.store(ctx, row)
		if err != nil {
			return nil, err
		}
		if unseen {
			a.recent.observe(out.Result == postgres.AcceptKeyExists)
			unseen = false
		}
		var d *Decision
		switch out.Result {
		case postgres.AcceptStored:
			if tracing.On() {
				span.SetAttributes(attribute.String("labels.request_id", row.Intent.RequestID))
			}
			stored(row, out.At)
			a.opts.Notifier.Notify(notify.ChannelIntents, "")
			d = &Decision{Outcome: Accepted, Intent: row.Intent}
		case postgres.AcceptKeyExists:
			if d, err = a.repeat(ctx, callerID, key, hash); err != nil {
				return nil, err
			}
		default:
			if d, err = a.parcelTaken(ctx, callerID, parcel, hash); err != nil {
				return nil, err
			}
		}
		if d != nil {
			d.PurgedKey = out.PurgedBefore
			return d, nil
		}
	}
	return nil, ErrInProgress
}

// row is what an accept stores. Its times are the database's: the
// statement sets them, and [stored] copies them in.
func (a *Accepter) row(callerID, key string, parcel labels.Parcel, hash []byte) postgres.AcceptRow {
	id := "lr_" + ulid.Make().String()
	return postgres.AcceptRow{
		Key: &postgres.Key{CallerID: callerID, Key: key, RequestHash: hash, FingerprintVersion: idempotency.FingerprintVersion,
			RequestID: id, State: postgres.StateStarted},
		Intent: &postgres.Intent{RequestID: id, CallerID: callerID, Key: key, RequestHash: hash,
			FingerprintVersion: idempotency.FingerprintVersion, Parcel: parcel,
			CarrierKey: carrier.DeriveKey(callerID, key), Status: labels.StatusPending},
		KeyRetention: a.opts.KeyRetention,
	}
}

// stored gives row the times its transaction wrote (at: the database's now()).
func stored(row postgres.AcceptRow, at time.Time) {
	at = at.UTC()
	row.Key.CreatedAt, row.Key.ExpiresAt, row.Intent.CreatedAt = at, at.Add(row.KeyRetention), at
}

// rowResult is one row's outcome of a shared transaction, or that the row is
// to be tried again alone.
type rowResult struct {
	out   postgres.AcceptOutcome
	alone bool
}

// store writes one accept, shared with the accepts waiting with it. A row
// the shared transaction could not store without waiting (busy: another
// accept of its key or parcel has not committed) is tried again alone, here,
// in its caller's goroutine: its wait, up to the claim wait, delays only its
// own request, and the shared transactions go on meanwhile.
func (a *Accepter) store(ctx context.Context, row postgres.AcceptRow) (postgres.AcceptOutcome, error) {
	if a.shared == nil {
		return a.acceptAlone(ctx, row)
	}
	r, err := a.shared.Do(ctx, row)
	if err != nil {
		return postgres.AcceptOutcome{}, err
	}
	if r.alone {
		return a.acceptAlone(ctx, row)
	}
	return r.out, nil
}

// acceptMany is the shared transaction. It waits for no other session: a
// busy row is handed back to its caller to be tried again alone. Should the
// statement meet a lock anyway (a row committed after it began and held
// since, an insert by a session that takes no claims), it fails after the
// claim wait, and every row is handed back.
func (a *Accepter) acceptMany(ctx context.Context, rows []postgres.AcceptRow) ([]rowResult, error) {
	res := make([]rowResult, len(rows))
	outs, err := postgres.Accept(ctx, a.opts.Pool, rows, postgres.AcceptOpts{LockTimeout: a.opts.ClaimWait})
	switch {
	case err == nil:
		for i, o := range outs {
			res[i] = rowResult{out: o, alone: o.Result == postgres.AcceptBusy}
		}
	case postgres.IsLockTimeout(err) && len(rows) > 1:
		for i := range res {
			res[i].alone = true
		}
	default:
		return nil, claimBusy(err)
	}
	return res, nil
}

// acceptAlone stores one row in a transaction of its own, waiting up to the
// claim wait for a concurrent accept of its key or parcel.
func (a *Accepter) acceptAlone(ctx context.Context, row postgres.AcceptRow) (postgres.AcceptOutcome, error) {
	outs, err := postgres.Accept(ctx, a.opts.Pool, []postgres.AcceptRow{row},
		postgres.AcceptOpts{LockTimeout: a.opts.ClaimWait, Wait: true, BeforeCommitFunc: a.opts.BeforeCommitFunc})
	if err != nil {
		return postgres.AcceptOutcome{}, claimBusy(err)
	}
	return outs[0], nil
}

func claimBusy(err error) error {
	if postgres.IsLockTimeout(err) {
		return ErrInProgress
	}
	return err
}

// repeat answers a request whose key exists, from its record: nil, nil when
// the record is gone (purged since).
func (a *Accepter) repeat(ctx context.Context, callerID, key string, hash []byte) (*Decision, error) {
	rec, err := postgres.GetKey(ctx, a.opts.Pool, callerID, key)
	switch {
	case errors.Is(err, postgres.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if !sameFingerprint(rec.FingerprintVersion, rec.RequestHash, hash) {
		return &Decision{Outcome: KeyReused, Key: rec}, nil
	}
	if rec.State == postgres.StateCompleted {
		return &Decision{Outcome: Replayed, Key: rec}, nil
	}
	in, err := postgres.GetIntent(ctx, a.opts.Pool, rec.CallerID, rec.RequestID)
	if err != nil {
		return nil, err
	}
	return &Decision{Outcome: Replayed, Intent: in, Key: rec}, nil
}

// parcelTaken answers a new key for a parcel and version that already have a
// pending or succeeded intent: a repeat of that intent if the request is the
// same, parcel_already_labelled if not. When that intent has failed for good
// since (the parcel is free again), the caller's retry will be accepted:
// [ErrInProgress].
func (a *Accepter) parcelTaken(ctx context.Context, callerID string, parcel labels.Parcel, hash []byte) (*Decision, error) {
	in, err := postgres.GetIntentByParcel(ctx, a.opts.Pool, callerID, parcel.OrderID, parcel.ParcelNo, parcel.LabelVersion)
	if errors.Is(err, postgres.ErrNotFound) {
		return nil, ErrInProgress
	}
	if err != nil {
		return nil, err
	}
	if sameFingerprint(in.FingerprintVersion, in.RequestHash, hash) {
		return &Decision{Outcome: Duplicate, Intent: in}, nil
	}
	return &Decision{Outcome: ParcelLabelled, Intent: in}, nil
}

// sameFingerprint compares a stored fingerprint with one made by the current
// version. When the algorithm changes, older versions are recomputed here.
func sameFingerprint(version int, stored, current []byte) bool {
	return version == idempotency.FingerprintVersion && bytes.Equal(stored, current)
}
