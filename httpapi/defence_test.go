package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
)

// A client that mints a new key per attempt is caught by the parcel's natural
// key: the same request replays the existing intent and stores nothing; a
// different request for the parcel is 409 parcel_already_labelled.
func TestNaturalKeyDefence(t *testing.T) {
	t.Parallel()
	s, tok, body := stacktest.Example(t, stacktest.Opts{})
	lr := s.Accept(tok, "attempt-1", body)

	// While pending or after success, a new key with the same request replays.
	r := s.Create(tok, "attempt-2", body)
	require.Contains(t, []int{http.StatusAccepted, http.StatusCreated}, r.Status, string(r.Body))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	s.WaitFinal(tok, lr.ID)
	r = s.Create(tok, "attempt-3", body)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	saved := s.Create(tok, "attempt-1", body)
	require.Equal(t, saved.Body, r.Body, "the natural-key replay is byte-identical to the saved response")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM idempotency_keys`), "nothing stored under the new keys")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents`))
	require.Equal(t, 2.0, testutil.ToFloat64(s.Metrics.IdempotencyOutcomes.WithLabelValues(metrics.OutcomeDuplicate)))

	// A different request for the same parcel and version.
	other := s.Create(tok, "attempt-4", stacktest.ParcelBody(918273, 1, 2000))
	requireProblem(t, other, http.StatusConflict, "parcel_already_labelled")
	require.Equal(t, "/v1/label-requests/"+lr.ID, other.Header.Get("Location"))

	// A reprint is a new version and a new intent.
	v2 := strings.Replace(string(body), `"service"`, `"label_version":2,"service"`, 1)
	require.Equal(t, http.StatusAccepted, s.Create(tok, "label:918273:1:v2", []byte(v2)).Status)

	// A retry after the key record was purged: the key is new again, the parcel is not.
	_, err := s.Pool.Exec(context.Background(), `DELETE FROM idempotency_keys WHERE idem_key = 'attempt-1'`)
	require.NoError(t, err)
	late := s.Create(tok, "attempt-1", body)
	require.Equal(t, http.StatusCreated, late.Status, string(late.Body))
	require.Equal(t, saved.Body, late.Body)
	_, total := s.Carrier.Purchases("")
	require.GreaterOrEqual(t, total, 1)
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM labels WHERE label_version = 1`))
}

// The labels table refuses a second label for a parcel and version on its own.
func TestLabelsNaturalKeyConstraint(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	tok := s.Token("fulfilment")
	lr := s.Accept(tok, "k", stacktest.ParcelBody(3, 1, 100))
	s.WaitFinal(tok, lr.ID)
	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	// A second, failed intent for the parcel gives the second label a request to point at.
	_, err = tx.Exec(ctx, `INSERT INTO label_intents (request_id, caller_id, idem_key, request_hash, fingerprint_version, order_id, parcel_no, label_version, payload, carrier_key, status, error, created_at, completed_at)
		SELECT 'lr_other', caller_id, 'k2', request_hash, 1, order_id, parcel_no, label_version, payload, 'carrier:x', 'failed', '{}', now(), now() FROM label_intents`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO labels (label_id, caller_id, request_id, order_id, parcel_no, label_version, service,
	        tracking_no, carrier_label_id, carrier_key, cost_cents, currency, created_by_key, created_at)
	     SELECT 'lbl_second', caller_id, 'lr_other', order_id, parcel_no, label_version, service, tracking_no || '-2',
	            carrier_label_id || '-2', 'carrier:x', cost_cents, currency, 'k2', now() FROM labels WHERE label_id = $1`,
		dbtest.Scalar[string](t, s.Pool, `SELECT label_id FROM labels`))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.Equal(t, "labels_natural_key", pgErr.ConstraintName)
}

func TestPreferWait(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	tok := s.Token("fulfilment")
	r := s.Create(tok, "k-wait", stacktest.ParcelBody(4, 1, 100), "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "wait=10", r.Header.Get("Preference-Applied"))
	replay := s.Create(tok, "k-wait", stacktest.ParcelBody(4, 1, 100))
	require.Equal(t, r.Body, replay.Body)

	// Out of range: not honoured, plain 202.
	r = s.Create(tok, "k-wait-31", stacktest.ParcelBody(4, 2, 100), "Prefer", "wait=31")
	require.Equal(t, http.StatusAccepted, r.Status)
	require.Empty(t, r.Header.Get("Preference-Applied"))
}

func TestPreferWaitTimesOutWith202(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	start := time.Now()
	r := s.Create(tok, "k", stacktest.ParcelBody(4, 1, 100), "Prefer", "respond-async, wait=1")
	require.Equal(t, http.StatusAccepted, r.Status)
	require.GreaterOrEqual(t, time.Since(start), time.Second)
	// That waiting holds no connection is checked while requests are held
	// (wait_test.go).
}

// A concurrent request with the same key that holds its claim beyond the
// bounded wait is answered 409 request_in_progress.
func TestRequestInProgress(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true, ClaimWait: 200 * time.Millisecond})
	tok := s.Token("fulfilment")
	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO idempotency_keys (caller_id, idem_key, request_hash, fingerprint_version, request_id, created_at, expires_at)
		VALUES ('fulfilment', 'k-busy', decode(repeat('00', 32), 'hex'), 1, 'lr_x', now(), now())`)
	require.NoError(t, err)
	r := s.Create(tok, "k-busy", stacktest.ParcelBody(1, 1, 100))
	requireProblem(t, r, http.StatusConflict, "request_in_progress")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/labels?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	defer pool.Close()
	h := httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: pool, Timeout: 2 * time.Second}, Log: zerolog.Nop()})
	srv := &stacktest.Stack{T: t, URL: serve(t, h)}
	r := srv.Create("lk_whatever", "k", stacktest.ParcelBody(1, 1, 100))
	requireProblem(t, r, http.StatusServiceUnavailable, "store_unavailable")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	ready := srv.Do(http.MethodGet, "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, ready.Status)
	require.Equal(t, http.StatusOK, srv.Do(http.MethodGet, "/healthz", "", nil).Status)
}

func TestRoutesAndOps(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	requireProblem(t, s.Do(http.MethodGet, "/v1/nothing", tok, nil), http.StatusNotFound, "not_found")
	r := s.Do(http.MethodDelete, "/v1/labels", tok, nil)
	requireProblem(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
	require.Equal(t, "POST", r.Header.Get("Allow"))
	requireProblem(t, s.Do(http.MethodGet, "/v1/label-requests/lr_nope", tok, nil), http.StatusNotFound, "not_found")
	requireProblem(t, s.Do(http.MethodGet, "/v1/labels/lbl_nope", tok, nil), http.StatusNotFound, "not_found")
	requireProblem(t, s.Do(http.MethodGet, "/v1/label-requests/lr_nope", "", nil), http.StatusUnauthorized, "unauthenticated")
	require.Equal(t, http.StatusOK, s.Do(http.MethodGet, "/healthz", "", nil).Status)
	require.Equal(t, http.StatusOK, s.Do(http.MethodGet, "/readyz", "", nil).Status)
	s.Create(tok, "k", stacktest.ParcelBody(1, 1, 100))
	m := s.Do(http.MethodGet, "/metrics", "", nil)
	require.Equal(t, http.StatusOK, m.Status)
	require.Contains(t, string(m.Body), `labels_idempotency_outcomes_total{outcome="new"} 1`)
	require.Contains(t, string(m.Body), `labels_http_requests_total{method="POST",route="create_label",status="`+strconv.Itoa(http.StatusAccepted)+`"} 1`)
}

// A key that arrives after its record was purged is treated as new, counted
// and logged as a possible duplicate; the parcel's natural key still answers
// with the existing label, so nothing is bought twice.
func TestPurgedKeyIsDetected(t *testing.T) {
	t.Parallel()
	s, tok, body := stacktest.Example(t, stacktest.Opts{})
	lr := s.Accept(tok, "label:918273:1:v1", body)
	s.WaitFinal(tok, lr.ID)
	saved := s.Create(tok, "label:918273:1:v1", body)
	require.Equal(t, http.StatusCreated, saved.Status)

	// Once the retention has passed (by the database's clock, which the
	// sweeper reads), the sweeper purges the key and leaves a tombstone.
	ctx := context.Background()
	_, err := s.Pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	n, err := jobs.Sweep(ctx, s.Pool, 100, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM idempotency_keys`))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM idempotency_tombstones WHERE caller_id = 'fulfilment' AND key_hash = sha256('label:918273:1:v1')`))

	late := s.Create(tok, "label:918273:1:v1", body)
	require.Equal(t, http.StatusCreated, late.Status, string(late.Body))
	require.Equal(t, saved.Body, late.Body)
	require.Equal(t, 1.0, testutil.ToFloat64(s.Metrics.IdempotencyOutcomes.WithLabelValues(metrics.OutcomePurgedKeyReused)))
	_, total := s.Carrier.Purchases("")
	require.Equal(t, 1, total)

	// Another caller's identical key has no tombstone.
	other := s.Token("other")
	require.Equal(t, http.StatusAccepted, s.Create(other, "label:918273:1:v1", body).Status)
	require.Equal(t, 1.0, testutil.ToFloat64(s.Metrics.IdempotencyOutcomes.WithLabelValues(metrics.OutcomePurgedKeyReused)))

	// Tombstones go after their own retention.
	_, err = s.Pool.Exec(ctx, `UPDATE idempotency_tombstones SET purged_at = purged_at - interval '31 days'`)
	require.NoError(t, err)
	tn, err := jobs.SweepTombstones(ctx, s.Pool, 30*24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), tn)
}
