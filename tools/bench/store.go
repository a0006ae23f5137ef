package main

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/postgres"
)

// fillChunk is how many keys one COPY writes.
const fillChunk = 50_000

// fill adds completed key records, with their succeeded intents, until the
// store holds n of them: order ids replayBase+0 … replayBase+n-1, the real
// fingerprint of each parcel, a rendered Label as the saved response, ULID
// request ids. The keys expire a day from now, as a completed key does; the
// purge measurement moves its own clock past that instead of the rows.
func (h *harness) fill(ctx context.Context, n int) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	for h.filled < n {
		to := min(n, h.filled+fillChunk)
		keys, intents := make([][]any, 0, to-h.filled), make([][]any, 0, to-h.filled)
		for i := h.filled; i < to; i++ {
			k, in, err := filledRow(int64(i), now)
			if err != nil {
				return err
			}
			keys, intents = append(keys, k), append(intents, in)
		}
		err := copyTables(ctx, h.pool, copyTable{"label_intents", intentColumns, intents}, copyTable{"idempotency_keys", keyColumns, keys})
		if err != nil {
			return err
		}
		h.filled = to
	}
	// What a day of traffic would have: statistics and a visibility map.
	if _, err := h.pool.Exec(ctx, `VACUUM ANALYZE idempotency_keys, label_intents`); err != nil {
		return err
	}
	// And no bulk load to write out: a fill writes gigabytes of WAL, and
	// the checkpoint it sets off (spread over minutes) would otherwise run
	// under the replays that follow.
	return h.checkpoint(ctx)
}

// The columns a filled key record and its intent set (filledRow's order).
var (
	intentColumns = []string{"request_id", "caller_id", "idem_key", "request_hash", "fingerprint_version", "order_id",
		"parcel_no", "label_version", "payload", "carrier_key", "status", "label_id", "created_at", "completed_at"}
	keyColumns = []string{"caller_id", "idem_key", "request_hash", "fingerprint_version", "request_id", "state",
		"response_status", "response_body", "created_at", "expires_at"}
)

// copyTable is rows to COPY into a table's columns.
type copyTable struct {
	name    string
	columns []string
	rows    [][]any
}

// copyTables copies each table's rows in one transaction, in order.
func copyTables(ctx context.Context, pool *pgxpool.Pool, tables ...copyTable) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, t := range tables {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.name}, t.columns, pgx.CopyFromRows(t.rows)); err != nil {
				return err
			}
		}
		return nil
	})
}

// filledRow is the key record and the intent of filled key i, as the API and
// the worker would have left them after a successful purchase.
func filledRow(i int64, now time.Time) (key, intent []any, err error) {
	order := replayBase + i
	parcel := parcelFor(order)
	canonical, err := idempotency.Canonical(parcel)
	if err != nil {
		return nil, nil, err
	}
	hash := idempotency.Fingerprint("POST", "/v1/labels", canonical)
	payload := string(bodyFor(order))
	accepted := now.Add(-time.Hour)
	completed := accepted.Add(800 * time.Millisecond)
	requestID := "lr_" + ulid.Make().String()
	label := labels.Label{
		LabelID:        "lbl_" + ulid.Make().String(),
		OrderID:        order,
		ParcelNo:       parcel.ParcelNo,
		LabelVersion:   parcel.LabelVersion,
		Service:        parcel.Service,
		TrackingNo:     fmt.Sprintf("%s%012d", cmp.Or(trackingPrefixes[parcel.Service], "GRD"), order%1_000_000_000_000),
		CarrierLabelID: "CL-" + strconv.FormatInt(order, 36),
		CostCents:      400 + order%900,
		Currency:       "USD",
		CreatedAt:      completed,
	}
	idemKey := keyFor(order)
	key = []any{callerName, idemKey, hash, int16(idempotency.FingerprintVersion), requestID, postgres.StateCompleted,
		int32(201), string(label.Body()), accepted, completed.Add(24 * time.Hour).Add(time.Hour)}
	intent = []any{requestID, callerName, idemKey, hash, int16(idempotency.FingerprintVersion), order, int32(parcel.ParcelNo),
		int32(parcel.LabelVersion), payload, carrier.DeriveKey(callerName, idemKey), labels.StatusSucceeded, label.LabelID,
		accepted, completed}
	return key, intent, nil
}

// trackingPrefixes are the simulator's tracking number prefixes (GRD for ground).
var trackingPrefixes = map[string]string{"express": "EXP", "overnight": "OVN"}

// sizes measures the key records' footprint: heap, indexes and TOAST per row.
func (h *harness) sizes(ctx context.Context) (*Store, error) {
	s := &Store{}
	var heap, index, toast, total int64
	err := h.pool.QueryRow(ctx, `
		SELECT count(*),
		       pg_relation_size('idempotency_keys') + pg_relation_size('idempotency_keys', 'fsm') + pg_relation_size('idempotency_keys', 'vm'),
		       pg_indexes_size('idempotency_keys'),
		       coalesce((SELECT pg_total_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'idempotency_keys'::regclass AND reltoastrelid <> 0), 0),
		       pg_total_relation_size('idempotency_keys')
		  FROM idempotency_keys`).Scan(&s.Rows, &heap, &index, &toast, &total)
	if err != nil {
		return nil, err
	}
	if s.Rows == 0 {
		return nil, fmt.Errorf("no key records to measure")
	}
	per := func(b int64) float64 { return round1(float64(b) / float64(s.Rows)) }
	s.BytesPerRecord, s.HeapPerRecord, s.IndexPerRecord, s.ToastPerRecord = per(total), per(heap), per(index), per(toast)
	var intents, intentBytes int64
	if err := h.pool.QueryRow(ctx, `SELECT count(*), pg_total_relation_size('label_intents') FROM label_intents`).Scan(&intents, &intentBytes); err != nil {
		return nil, err
	}
	if intents > 0 {
		s.IntentBytesPerRow = round1(float64(intentBytes) / float64(intents))
	}
	return s, nil
}

// purge runs the sweeper's statement (postgres.Purge, what jobs.Sweep
// loops over, with tombstones) at the default SWEEP_BATCH over the filled
// keys until none is left or --purge-max has passed. Its clock is two days
// ahead, so every filled key has expired.
func (h *harness) purge(ctx context.Context) Purge {
	const batch = 1000
	p := Purge{Batch: batch}
	now := time.Now().Add(48 * time.Hour)
	began := time.Now()
	var durs []int64
	for time.Since(began) < h.cfg.PurgeMax && ctx.Err() == nil {
		t := time.Now()
		n, err := postgres.Purge(postgres.AsOf(ctx, now), h.pool, batch)
		durs = append(durs, int64(time.Since(t)))
		if err != nil {
			p.Error = err.Error()
			break
		}
		p.Deleted += n
		if n < batch {
			p.Complete = true
			break
		}
	}
	secs := time.Since(began).Seconds()
	p.Seconds = round2(secs)
	if secs > 0 {
		p.KeysPerSec = round1(float64(p.Deleted) / secs)
	}
	l := summarize(durs)
	p.BatchP50Ms, p.BatchP99Ms = l.P50, l.P99
	return p
}
