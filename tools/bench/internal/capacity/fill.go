package capacity

// Phase 1: the fill. Records that look real, with their intents, labels
// and River jobs, and a sample written the way the service writes a key.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/postgres"
)

// splitmix is a cheap deterministic hash: the same row always looks the same.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

var (
	firstNames = []string{"Anna", "Jonas", "Marie", "Lukas", "Sofia", "Noah", "Emma", "Elias", "Mia", "Paul", "Lea", "Finn"}
	lastNames  = []string{"Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker", "Dubois", "Jansen", "Kowalski", "Rossi"}
	streets    = []string{"Hauptstraße", "Bahnhofstraße", "Rue de la Paix", "Kerkstraat", "Long Lane", "Ulica Polna", "Via Roma", "Gartenweg"}
	cities     = []struct{ city, country string }{{"Berlin", "DE"}, {"Hamburg", "DE"}, {"München", "DE"}, {"Paris", "FR"}, {"Lyon", "FR"}, {"Utrecht", "NL"}, {"Leeds", "GB"}, {"Kraków", "PL"}, {"Milano", "IT"}, {"Valencia", "ES"}}
	serviceOf  = []struct {
		name, prefix  string
		base, divisor int64
	}{{"ground", "GRD", 450, 10}, {"express", "EXP", 900, 5}, {"overnight", "OVN", 1800, 4}}
)

func (e *env) callerFor(h uint64) string {
	p := int(h % 100)
	for _, c := range callerWeights {
		if p < c.share {
			return c.id
		}
		p -= c.share
	}
	return callerWeights[0].id
}

// parcelFor is the parcel of row i: what a caller sent.
func parcelFor(order int64, parcelNo int, h uint64) labels.Parcel {
	c := cities[h%uint64(len(cities))]
	line2 := ""
	if h%5 == 0 {
		line2 = fmt.Sprintf("Apt %d", 1+h%40)
	}
	svc := 0
	switch r := (h >> 8) % 10; {
	case r >= 9:
		svc = 2
	case r >= 7:
		svc = 1
	}
	return labels.Parcel{
		OrderID: order, ParcelNo: parcelNo, WeightG: int(200 + (h>>16)%20000), Service: serviceOf[svc].name, LabelVersion: 1,
		ShipTo: labels.Address{
			Name:       firstNames[(h>>20)%uint64(len(firstNames))] + " " + lastNames[(h>>24)%uint64(len(lastNames))],
			Line1:      fmt.Sprintf("%s %d", streets[(h>>28)%uint64(len(streets))], 1+(h>>32)%180),
			Line2:      line2,
			City:       c.city,
			PostalCode: fmt.Sprintf("%05d", (h>>36)%100000),
			Country:    c.country,
		},
	}
}

// fillRow is one record with its intent and label, as COPY rows.
type fillRow struct {
	key, intent, label []any
	live               *liveKey
}

var (
	keyColumns    = []string{"caller_id", "idem_key", "request_hash", "fingerprint_version", "request_id", "state", "locked_until", "lease_token", "response_status", "response_body", "created_at", "expires_at"}
	intentColumns = []string{"request_id", "caller_id", "idem_key", "request_hash", "fingerprint_version", "order_id", "parcel_no", "label_version", "payload", "carrier_key", "status", "label_id", "error", "created_at", "completed_at"}
	labelColumns  = []string{"label_id", "caller_id", "request_id", "order_id", "parcel_no", "label_version", "service", "tracking_no", "carrier_label_id", "carrier_key", "cost_cents", "currency", "created_by_key", "purchased_at", "created_at"}
)

// row renders record i. Records 0..Records-1 expired yesterday, in completion
// order; the rest complete within the last 20 hours and expire later.
func (e *env) row(i int, entropy io.Reader) (fillRow, error) {
	h := splitmix(uint64(i))
	var completed time.Time
	live := i >= e.cfg.Records
	if !live {
		frac := float64(i) / float64(e.cfg.Records)
		completed = e.day0.Add(-24*time.Hour + time.Duration(frac*float64(24*time.Hour)))
	} else {
		frac := float64(i-e.cfg.Records) / float64(e.cfg.Live)
		completed = e.now0.Add(-time.Minute - time.Duration(frac*float64(20*time.Hour)))
	}
	completed = completed.Truncate(time.Microsecond)
	created := completed.Add(-time.Duration(600+h%2400) * time.Millisecond)
	expires := completed.Add(24 * time.Hour)
	callerID := e.callerFor(h)
	order := int64(fillOrderBase + i)
	parcelNo := 1 + int(h>>40)%3
	key := fmt.Sprintf("label:%d:%d:v1", order, parcelNo)
	parcel := parcelFor(order, parcelNo, h)
	canonical, err := idempotency.Canonical(parcel)
	if err != nil {
		return fillRow{}, err
	}
	hash := idempotency.Fingerprint(http.MethodPost, "/v1/labels", canonical)
	requestID := "lr_" + ulid.MustNew(ulid.Timestamp(created), entropy).String()
	svc := serviceOf[0]
	for _, s := range serviceOf {
		if s.name == parcel.Service {
			svc = s
		}
	}
	l := labels.Label{
		LabelID:        "lbl_" + ulid.MustNew(ulid.Timestamp(completed), entropy).String(),
		OrderID:        order,
		ParcelNo:       parcelNo,
		LabelVersion:   1,
		Service:        parcel.Service,
		TrackingNo:     fmt.Sprintf("%s%09d", svc.prefix, order),
		CarrierLabelID: fmt.Sprintf("CL-%d", 5_000_000+i),
		CostCents:      svc.base + int64(parcel.WeightG)/svc.divisor,
		Currency:       "USD",
		CreatedAt:      completed,
	}
	body := l.Body()
	payload, err := json.Marshal(parcel)
	if err != nil {
		return fillRow{}, err
	}
	carrierKey := carrier.DeriveKey(callerID, key)
	r := fillRow{
		key: []any{callerID, key, hash, int16(idempotency.FingerprintVersion), requestID, postgres.StateCompleted,
			nil, nil, int32(201), string(body), created, expires},
		intent: []any{requestID, callerID, key, hash, int16(idempotency.FingerprintVersion), order, int32(parcelNo), int32(1),
			payload, carrierKey, labels.StatusSucceeded, l.LabelID, nil, created, completed},
		label: []any{l.LabelID, callerID, requestID, order, int32(parcelNo), int32(1), l.Service, l.TrackingNo, l.CarrierLabelID,
			carrierKey, l.CostCents, l.Currency, key, completed.Add(-40 * time.Millisecond), completed},
	}
	if live {
		r.live = &liveKey{caller: callerID, key: key, body: payload}
	}
	return r, nil
}

// fill writes Records + Live records with their intents and labels by COPY,
// in chunks rendered on every CPU, then keeps a copy of the key records
// (capacity_fill, unlogged) to restore between purges, and VACUUM ANALYZEs.
func (e *env) fill(ctx context.Context) (Fill, error) {
	total := e.cfg.Records + e.cfg.Live
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return Fill{}, err
	}
	defer conn.Release()
	t, err := conn.Conn().LoadType(ctx, "idempotency_state")
	if err != nil {
		return Fill{}, err
	}
	conn.Conn().TypeMap().RegisterType(t)

	start := time.Now()
	const chunk = 25_000
	workers := max(1, runtime.NumCPU())
	type rendered struct {
		rows []fillRow
		err  error
	}
	// Render the next chunk while the last one is copied.
	chunks := make(chan rendered, 1)
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(chunks)
		for off := 0; off < total && gctx.Err() == nil; off += chunk {
			n := min(chunk, total-off)
			rows := make([]fillRow, n)
			var wg sync.WaitGroup
			errs := make([]error, workers)
			for w := range workers {
				wg.Go(func() {
					entropy := mrand.NewChaCha8([32]byte{byte(w), byte(off), byte(off >> 8), byte(off >> 16)})
					for j := w; j < n; j += workers {
						if rows[j], errs[w] = e.row(off+j, entropy); errs[w] != nil {
							return
						}
					}
				})
			}
			wg.Wait()
			select {
			case chunks <- rendered{rows, errors.Join(errs...)}:
			case <-gctx.Done():
				return
			}
		}
	}()
	done := 0
	for c := range chunks {
		if c.err != nil {
			return Fill{}, c.err
		}
		part := c.rows
		for _, tbl := range []struct {
			name string
			cols []string
			get  func(fillRow) []any
		}{
			{"idempotency_keys", keyColumns, func(r fillRow) []any { return r.key }},
			{"label_intents", intentColumns, func(r fillRow) []any { return r.intent }},
			{"labels", labelColumns, func(r fillRow) []any { return r.label }}, // after its intents: foreign key
		} {
			i := 0
			_, err := conn.Conn().CopyFrom(ctx, pgx.Identifier{tbl.name}, tbl.cols, pgx.CopyFromFunc(func() ([]any, error) {
				if i >= len(part) {
					return nil, nil
				}
				i++
				return tbl.get(part[i-1]), nil
			}))
			if err != nil {
				return Fill{}, fmt.Errorf("copy %s: %w", tbl.name, err)
			}
		}
		for _, r := range part {
			if r.live != nil {
				e.live = append(e.live, *r.live)
			}
		}
		done += len(part)
		if done/chunk%8 == 0 || done == total {
			e.logf("  filled %d of %d", done, total)
		}
	}
	if done != total {
		return Fill{}, fmt.Errorf("filled %d of %d: %w", done, total, ctx.Err())
	}
	secs := time.Since(start).Seconds()
	for _, q := range []string{
		`CREATE UNLOGGED TABLE capacity_fill AS SELECT * FROM idempotency_keys`,
		// A day of older tombstones (other keys): in service the table is
		// never empty (TOMBSTONE_RETENTION, 30 days), and its statistics
		// decide the plan of the tombstone look-up in every accept.
		`CREATE UNLOGGED TABLE capacity_tombstones AS
		 SELECT caller_id, sha256(convert_to('purged-before:' || idem_key, 'UTF8')) AS key_hash,
		        expires_at - interval '1 day' AS purged_at
		   FROM capacity_fill WHERE expires_at < now()`,
		`INSERT INTO idempotency_tombstones SELECT * FROM capacity_tombstones`,
		`VACUUM ANALYZE idempotency_keys, label_intents, labels, idempotency_tombstones, capacity_fill`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			return Fill{}, err
		}
	}
	return Fill{Rows: total, Seconds: secs, RowsPerSec: float64(total) / secs,
		Method: "COPY (pgx CopyFrom) of key records, intents and labels, 25,000 rows a chunk"}, nil
}

// churned writes a sample the way the service writes a key: inserted started
// by the API, leased by the worker, completed with the response; then VACUUM.
// Dead versions leave free space a bulk load does not have: an upper bound.
func (e *env) churned(ctx context.Context) (Size, error) {
	sample := min(e.cfg.Records+e.cfg.Live, 200_000)
	for _, q := range []string{
		`CREATE TABLE capacity_churn (LIKE idempotency_keys INCLUDING ALL)`,
		fmt.Sprintf(`INSERT INTO capacity_churn (caller_id, idem_key, request_hash, fingerprint_version, request_id, state, created_at, expires_at)
		 SELECT caller_id, idem_key, request_hash, fingerprint_version, request_id, 'started', created_at, created_at + interval '24 h'
		   FROM capacity_fill ORDER BY created_at LIMIT %d`, sample),
		`UPDATE capacity_churn SET locked_until = created_at + interval '30 s', lease_token = gen_random_uuid()`,
		`UPDATE capacity_churn c
		    SET state = 'completed', locked_until = NULL, lease_token = NULL, response_status = f.response_status,
		        response_body = f.response_body, expires_at = f.expires_at
		   FROM capacity_fill f WHERE f.caller_id = c.caller_id AND f.idem_key = c.idem_key`,
		`VACUUM ANALYZE capacity_churn`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			return Size{}, err
		}
	}
	s, err := tableSize(ctx, e.pool, "capacity_churn")
	if err != nil {
		return s, err
	}
	s.Table = "idempotency_keys (churned sample)"
	s.Note = "insert started, lease update, completion update, VACUUM: the dead versions' space stays with the table"
	_, err = e.pool.Exec(ctx, `DROP TABLE capacity_churn`)
	return s, err
}

// riverJobs adds one completed buy_label job per filled intent, shaped like
// the jobs the pipeline completed for real: River keeps completed jobs for
// CompletedJobRetentionPeriod = KEY_RETENTION, so it holds as many as there are keys.
func (e *env) riverJobs(ctx context.Context) error {
	tag, err := e.pool.Exec(ctx, `
		INSERT INTO river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at, priority,
		                       args, attempted_by, errors, kind, metadata, queue, tags, unique_key, unique_states)
		SELECT t.state, t.attempt, t.max_attempts, i.created_at + interval '35 ms', i.created_at + interval '15 ms', i.completed_at,
		       i.created_at + interval '15 ms', t.priority, jsonb_build_object('request_id', i.request_id), t.attempted_by, t.errors,
		       t.kind, t.metadata, t.queue, t.tags,
		       sha256(convert_to('&kind=buy_label&args=' || jsonb_build_object('request_id', i.request_id)::text, 'UTF8')),
		       t.unique_states
		  FROM label_intents i,
		       (SELECT * FROM river_job WHERE kind = 'buy_label' AND state = 'completed' ORDER BY id LIMIT 1) t
		 WHERE i.order_id >= $1 AND i.order_id < $2
		 ORDER BY i.completed_at`, fillOrderBase, fillOrderBase+e.cfg.Records+e.cfg.Live)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errors.New("no completed buy_label job to copy the shape of")
	}
	_, err = e.pool.Exec(ctx, `VACUUM ANALYZE river_job`)
	return err
}
