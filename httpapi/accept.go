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
	var d *decision
	var purged bool
	err := pgx.BeginFunc(ctx, s.deps.Pool, func(tx pgx.Tx) error {
		// A concurrent request with the same key holds the key's index entry
		// until it commits; wait for it, but only so long.
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", s.deps.ClaimWait.Milliseconds())); err != nil {
			return err
		}
		inserted, purgedBefore, existing, err := idempotency.Insert(ctx, tx, rec)
		if err != nil {
			return err
		}
		purged = purgedBefore
		if !inserted {
			d, err = s.repeat(ctx, tx, existing, hash)
			if err != nil {
				return err
			}
			return errRollback
		}
		if s.deps.AfterKeyInsertFunc != nil {
			if err := s.deps.AfterKeyInsertFunc(ctx); err != nil {
				return err
			}
		}
		err = outbox.Insert(ctx, tx, intent)
		if errors.Is(err, outbox.ErrParcelTaken) {
			d, err = s.parcelTaken(ctx, tx, callerID, parcel, hash)
			if err != nil {
				return err
			}
			return errRollback // nothing is stored under the new key
		}
		if err != nil {
			return err
		}
		d = &decision{outcome: metrics.OutcomeNew, intent: intent}
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return nil, errClaimBusy
	}
	if err != nil && !errors.Is(err, errRollback) {
		return nil, err
	}
	d.purgedKey = purged
	return d, nil
}

// errClaimBusy says a concurrent request with the same key held its claim
// longer than ClaimWait.
var errClaimBusy = errors.New("a concurrent request with the same key holds its claim")

// errRollback ends a transaction that found its answer without writing.
var errRollback = errors.New("rollback")

// repeat answers a request whose key exists.
func (s *Server) repeat(ctx context.Context, tx pgx.Tx, rec *idempotency.Record, hash []byte) (*decision, error) {
	if !sameFingerprint(rec.FingerprintVersion, rec.RequestHash, hash) {
		return &decision{outcome: metrics.OutcomeKeyReused, record: rec}, nil
	}
	in, err := outbox.Get(ctx, tx, rec.CallerID, rec.RequestID)
	if err != nil {
		return nil, err
	}
	return &decision{outcome: metrics.OutcomeReplayed, intent: in, record: rec}, nil
}

// parcelTaken answers a new key for a parcel and version that already have a
// pending or succeeded intent: a replay of that intent if the request is the
// same, 409 parcel_already_labelled if not.
func (s *Server) parcelTaken(ctx context.Context, tx pgx.Tx, callerID string, parcel labels.Parcel, hash []byte) (*decision, error) {
	in, err := outbox.GetByParcel(ctx, tx, callerID, parcel.OrderID, parcel.ParcelNo, parcel.LabelVersion)
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
