package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/oklog/ulid/v2"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/outbox"
)

// decision is what the accept found or did, before it is rendered.
type decision struct {
	outcome string         // one of the metrics.Outcome… values
	intent  *outbox.Intent // the intent the answer is about (nil for key_reused)
	record  *idempotency.Record
	// purgedKey says the key matched a tombstone: it was completed and purged
	// before, and now arrives again (counted and logged; answered as new, with
	// the parcel still protected by the natural key).
	purgedKey bool
}

// accept runs the algorithm of the seed for one request, with the claim
// written by the API and the purchase left to a worker: in one transaction it
// inserts the key record and the intent, or finds what answers the request.
func (s *Server) accept(ctx context.Context, callerID, key string, parcel labels.Parcel, hash []byte) (*decision, error) {
	read, unseen := true, false
	if s.accepts != nil {
		read, unseen = s.readFirst.decide(callerID, key)
		if read {
			s.pathReadFirst.Inc()
		} else {
			s.pathInsertFirst.Inc()
		}
	}
	d, err := s.acceptKey(ctx, callerID, key, parcel, hash, read)
	if unseen && err == nil {
		s.readFirst.observe(d.outcome == metrics.OutcomeReplayed || d.outcome == metrics.OutcomeKeyReused)
	}
	return d, err
}

// acceptKey is accept after the choice to read first or not.
func (s *Server) acceptKey(ctx context.Context, callerID, key string, parcel labels.Parcel, hash []byte, readFirst bool) (*decision, error) {
	// A repeat read first is answered from what is stored, read outside any
	// transaction (the key record; for a key not completed yet, its intent
	// too): it waits for no commit, and writes nothing (readfirst.go says
	// which creates read first).
	// A key that is not there goes on to be inserted; should it be there
	// after all (a concurrent request inserted it first, or it was not
	// read), the insert finds it and the repeat is answered below.
	if readFirst {
		if d, err := s.storedAnswer(ctx, callerID, key, hash); d != nil || err != nil {
			return d, err
		}
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	rec := &idempotency.Record{
		CallerID:           callerID,
		Key:                key,
		RequestHash:        hash,
		FingerprintVersion: idempotency.FingerprintVersion,
		RequestID:          "lr_" + ulid.Make().String(),
		CreatedAt:          now,
		ExpiresAt:          now.Add(s.deps.KeyRetention),
	}
	intent := &outbox.Intent{
		RequestID:          rec.RequestID,
		CallerID:           callerID,
		Key:                key,
		RequestHash:        hash,
		FingerprintVersion: idempotency.FingerprintVersion,
		Parcel:             parcel,
		CarrierKey:         carrier.DeriveKey(callerID, key),
		Status:             labels.StatusPending,
		CreatedAt:          now,
	}
	if s.accepts != nil {
		if d, ok, err := s.acceptShared(ctx, rec, intent, hash); ok || err != nil {
			return d, err
		}
	}
	d, purged, err := s.acceptTx(ctx, rec, intent)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return nil, errClaimBusy
	}
	if err != nil {
		return nil, err
	}
	if d == nil {
		// Not stored: the answer comes from what already exists, read after
		// the rollback: the key, or else (the key did not exist, so the
		// parcel's natural key was taken) the intent holding the parcel.
		if d, err = s.storedAnswer(ctx, callerID, key, hash); d == nil && err == nil {
			d, err = s.parcelTaken(ctx, callerID, parcel, hash)
		}
		if err != nil {
			return nil, err
		}
	}
	d.purgedKey = purged
	return d, nil
}

// storedAnswer answers a request from its key record, when there is one:
// nil, nil when the key is not stored.
func (s *Server) storedAnswer(ctx context.Context, callerID, key string, hash []byte) (*decision, error) {
	rec, err := idempotency.Get(ctx, s.deps.Pool, callerID, key)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return s.repeat(ctx, rec, hash)
}

// acceptTx is the accept transaction, in two round trips: BEGIN, the key
// insert and the intent insert are pipelined in one batch; then COMMIT when
// both were inserted, ROLLBACK otherwise (an existing key or a taken parcel:
// nothing is stored). The key is always inserted first, so two accepts never
// wait for each other in opposite orders.
func (s *Server) acceptTx(ctx context.Context, rec *idempotency.Record, intent *outbox.Intent) (d *decision, purged bool, err error) {
	conn, err := s.deps.Pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Release()
	var key idempotency.InsertResult
	var intentInserted bool
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// A concurrent request with the same key holds the key's index entry
	// until it commits; wait for it, but only so long.
	b.Queue(fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", s.deps.ClaimWait.Milliseconds()))
	idempotency.QueueInsert(b, rec, &key)
	if err := outbox.QueueInsert(b, intent, &intentInserted); err != nil {
		return nil, false, err
	}
	commit := false
	defer func() {
		if !commit {
			// A failed batch leaves the transaction aborted; a finished one
			// that stored nothing is undone. Either way the connection is clean after.
			if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
				conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // a broken connection is not reused
			}
		}
	}()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, false, err
	}
	if !key.Inserted || !intentInserted {
		return nil, key.PurgedBefore, nil
	}
	if s.deps.AfterKeyInsertFunc != nil {
		if err := s.deps.AfterKeyInsertFunc(ctx); err != nil {
			return nil, false, err
		}
	}
	commit = true
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return nil, false, err
	}
	s.deps.Notifier.Notify(notify.ChannelIntents, "")
	return &decision{outcome: metrics.OutcomeNew, intent: intent}, key.PurgedBefore, nil
}

// errClaimBusy says a concurrent request with the same key held its claim
// longer than ClaimWait.
var errClaimBusy = errors.New("a concurrent request with the same key holds its claim")

// repeat answers a request whose key exists. A completed key answers with
// its saved response, and needs no intent.
func (s *Server) repeat(ctx context.Context, rec *idempotency.Record, hash []byte) (*decision, error) {
	if !sameFingerprint(rec.FingerprintVersion, rec.RequestHash, hash) {
		return &decision{outcome: metrics.OutcomeKeyReused, record: rec}, nil
	}
	if rec.State == idempotency.StateCompleted {
		return &decision{outcome: metrics.OutcomeReplayed, record: rec}, nil
	}
	in, err := outbox.Get(ctx, s.deps.Pool, rec.CallerID, rec.RequestID)
	if err != nil {
		return nil, err
	}
	return &decision{outcome: metrics.OutcomeReplayed, intent: in, record: rec}, nil
}

// parcelTaken answers a new key for a parcel and version that already have a
// pending or succeeded intent: a replay of that intent if the request is the
// same, 409 parcel_already_labelled if not; errClaimBusy when that intent
// failed for good since (the parcel is free again).
func (s *Server) parcelTaken(ctx context.Context, callerID string, parcel labels.Parcel, hash []byte) (*decision, error) {
	in, err := outbox.GetByParcel(ctx, s.deps.Pool, callerID, parcel.OrderID, parcel.ParcelNo, parcel.LabelVersion)
	if errors.Is(err, outbox.ErrNotFound) {
		// The intent holding the parcel failed for good in the meantime,
		// which frees the parcel: the caller's retry will be accepted.
		return nil, errClaimBusy
	}
	if err != nil {
		return nil, err
	}
	if sameFingerprint(in.FingerprintVersion, in.RequestHash, hash) {
		return &decision{outcome: metrics.OutcomeDuplicate, intent: in}, nil
	}
	return &decision{outcome: metrics.OutcomeParcelLabelled, intent: in}, nil
}

// sameFingerprint compares a stored fingerprint with one made by the current
// version. When the algorithm changes, older versions are recomputed here.
func sameFingerprint(version int, stored, current []byte) bool {
	return version == idempotency.FingerprintVersion && bytes.Equal(stored, current)
}
