package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

type problem struct {
	Type           string `json:"type"`
	Title          string `json:"title"`
	Status         int    `json:"status"`
	Code           string `json:"code"`
	Detail         string `json:"detail"`
	CarrierCode    string `json:"carrier_code"`
	CarrierMessage string `json:"carrier_message"`
	Errors         []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func requireProblem(t *testing.T, r stacktest.Response, status int, code string) problem {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Body))
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	p := stacktest.Decode[problem](t, r.Body)
	require.Equal(t, code, p.Code)
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Title)
	require.True(t, strings.HasSuffix(p.Type, "/"+code), p.Type)
	return p
}

// The seed's story: 202, poll to succeeded, the same request replays the saved
// 201 byte for byte, a changed weight is 422.
func TestCreatePollReplayReuse(t *testing.T) {
	t.Parallel()
	s, tok, body := stacktest.Example(t, stacktest.Opts{})

	r := s.Create(tok, "label:918273:1:v1", body)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	lr := stacktest.Decode[labels.LabelRequest](t, r.Body)
	require.Equal(t, "pending", lr.Status)
	require.Equal(t, "label:918273:1:v1", lr.IdempotencyKey)
	require.Nil(t, lr.CompletedAt)
	require.Equal(t, "/v1/label-requests/"+lr.ID, r.Header.Get("Location"))
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))

	final := s.Final(tok, lr.ID)
	require.Equal(t, "succeeded", final.Status)
	require.NotNil(t, final.CompletedAt)
	require.NotEmpty(t, final.Label)

	replay := s.Create(tok, "label:918273:1:v1", body)
	require.Equal(t, http.StatusCreated, replay.Status, string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	label := stacktest.Decode[map[string]any](t, replay.Body)
	require.Equal(t, "/v1/labels/"+label["label_id"].(string), replay.Header.Get("Location"))
	require.JSONEq(t, string(final.Label), string(replay.Body))

	// Saved byte for byte: a second replay and GET /v1/labels/{id} are identical.
	again := s.Create(tok, "label:918273:1:v1", body)
	require.Equal(t, replay.Body, again.Body)
	saved := dbtest.Scalar[string](t, s.Pool, `SELECT response_body::text FROM idempotency_keys WHERE idem_key = $1`, "label:918273:1:v1")
	require.Equal(t, saved, string(replay.Body))
	got := s.Do(http.MethodGet, "/v1/labels/"+label["label_id"].(string), tok, nil)
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, replay.Body, got.Body)

	reused := s.Create(tok, "label:918273:1:v1", stacktest.ParcelBody(918273, 1, 1500))
	requireProblem(t, reused, http.StatusUnprocessableEntity, "idempotency_key_reused")

	n, total := s.Carrier.Purchases(carrierKeyOf(t, s, "fulfilment", "label:918273:1:v1"))
	require.Equal(t, 1, n)
	require.Equal(t, 1, total)
}

// The label document the carrier named is stored with the label and
// returned in the 201, its replays, the label request and GET /v1/labels/{id},
// all the same bytes; a label whose carrier named none has no document member.
func TestLabelDocument(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	tok := s.Token("fulfilment")
	// The fake carrier names a document for its first label, none for its second.
	for i, want := range []map[string]any{
		{"url": "https://carrier.test/v1/labels/CL-1/document", "content_type": "application/zpl", "size_bytes": 1001.0},
		nil,
	} {
		key := fmt.Sprintf("doc-%d", i)
		body := stacktest.ParcelBody(int64(8100+i), 1, 1450)
		lr := s.Accept(tok, key, body)
		final := s.Final(tok, lr.ID)
		require.Equal(t, "succeeded", final.Status)
		replay := s.Create(tok, key, body)
		require.Equal(t, http.StatusCreated, replay.Status)
		label := stacktest.Decode[map[string]any](t, replay.Body)
		if want == nil {
			require.NotContains(t, label, "document")
		} else {
			require.Equal(t, want, label["document"])
		}
		got := s.Do(http.MethodGet, "/v1/labels/"+label["label_id"].(string), tok, nil)
		require.Equal(t, replay.Body, got.Body, "GET /v1/labels/{id} is the saved 201, byte for byte")
		require.Equal(t, string(replay.Body), string(final.Label))
		var url, ctype *string
		var size *int64
		require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT document_url, document_content_type, document_size_bytes FROM labels WHERE label_id = $1`,
			label["label_id"]).Scan(&url, &ctype, &size))
		require.Equal(t, want == nil, url == nil && ctype == nil && size == nil, "stored with the label")
	}
}

func carrierKeyOf(t *testing.T, s *stacktest.Stack, callerID, key string) string {
	t.Helper()
	ck := dbtest.Scalar[string](t, s.Pool, `SELECT carrier_key FROM label_intents WHERE caller_id = $1 AND idem_key = $2`, callerID, key)
	return ck
}

// Member order and whitespace do not make a different request; an omitted
// label_version and line2 equal their defaults.
func TestReplayWhileePendingAndCanonicalForms(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	lr := s.Accept(tok, "k1", stacktest.ParcelBody(1, 1, 100))

	reordered := []byte(`{ "ship_to": {"country":"DE","postal_code":"10115","city":"Exampleton","line2":"","line1":"1 Example Street","name":"A. Example"},
		"label_version": 1, "service":"ground", "weight_g":100, "parcel_no":1, "order_id":1 }`)
	r := s.Create(tok, `"k1"`, reordered) // the Structured-Field string form names the same key
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, lr.ID, stacktest.Decode[labels.LabelRequest](t, r.Body).ID)
	require.Equal(t, "/v1/label-requests/"+lr.ID, r.Header.Get("Location"))
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents`))
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM idempotency_keys`))
}

// A repeat is answered from what is stored, without writing: it is read
// first (accept.Accepter.Accept), so it is answered while another
// transaction holds a lock that stops every write to the keys and the
// intents (but not reads), and a different body under the key is still
// refused. A new key waits for the lock and is not stored (it gives up
// at the store timeout: the first use of a statement on a connection is
// prepared before lock_timeout is set).
func TestRepeatIsReadOnly(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true, ClaimWait: 200 * time.Millisecond})
	tok := s.Token("fulfilment")
	body := stacktest.ParcelBody(1, 1, 100)
	first := s.Create(tok, "k1", body)
	require.Equal(t, http.StatusAccepted, first.Status)

	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // ends the test's lock
	_, err = tx.Exec(ctx, `LOCK TABLE idempotency_keys, label_intents IN EXCLUSIVE MODE`)
	require.NoError(t, err)

	r := s.Create(tok, "k1", body)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, stacktest.Decode[labels.LabelRequest](t, first.Body).ID, stacktest.Decode[labels.LabelRequest](t, r.Body).ID)
	requireProblem(t, s.Create(tok, "k1", stacktest.ParcelBody(1, 1, 200)), http.StatusUnprocessableEntity, "idempotency_key_reused")

	blocked := s.Create(tok, "k2", stacktest.ParcelBody(2, 1, 100))
	require.NotEqual(t, http.StatusAccepted, blocked.Status, "a new key was stored through the lock")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, http.StatusAccepted, s.Create(tok, "k2", stacktest.ParcelBody(2, 1, 100)).Status)
}

func TestKeyAndAuthErrors(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	body := stacktest.ParcelBody(1, 1, 100)

	requireProblem(t, s.Do(http.MethodPost, "/v1/labels", tok, body), http.StatusBadRequest, "idempotency_key_missing")
	for _, bad := range [][]string{
		{"Idempotency-Key", ""},
		{"Idempotency-Key", strings.Repeat("k", 256)},
		{"Idempotency-Key", "has space"},
		{"Idempotency-Key", "ключ"},
		{"Idempotency-Key", `"unterminated`},
		{"Idempotency-Key", "a", "Idempotency-Key", "b"},
	} {
		r := s.Do(http.MethodPost, "/v1/labels", tok, body, bad...)
		requireProblem(t, r, http.StatusBadRequest, "idempotency_key_invalid")
	}
	require.Equal(t, http.StatusAccepted, s.Create(tok, strings.Repeat("k", 255), body).Status)

	requireProblem(t, s.Create("", "k", body), http.StatusUnauthorized, "unauthenticated")
	requireProblem(t, s.Create("lk_nope", "k", body), http.StatusUnauthorized, "unauthenticated")
	r := s.Do(http.MethodPost, "/v1/labels", "", body, "Idempotency-Key", "k", "Authorization", "Basic Zm9vOmJhcg==")
	requireProblem(t, r, http.StatusUnauthorized, "unauthenticated")
	// 401 comes before anything else is looked at, even a missing key.
	requireProblem(t, s.Do(http.MethodPost, "/v1/labels", "", []byte("garbage")), http.StatusUnauthorized, "unauthenticated")
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM idempotency_keys`))
}

func TestValidation(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")
	valid := map[string]any{}
	require.NoError(t, json.Unmarshal(stacktest.ParcelBody(5, 1, 100), &valid))
	with := func(mut func(m map[string]any)) []byte {
		b, _ := json.Marshal(valid)
		m := map[string]any{}
		_ = json.Unmarshal(b, &m)
		mut(m)
		out, _ := json.Marshal(m)
		return out
	}
	shipTo := func(m map[string]any) map[string]any { return m["ship_to"].(map[string]any) }
	cases := map[string]struct {
		body  []byte
		field string
	}{
		"unknown field":      {with(func(m map[string]any) { m["colour"] = "red" }), "colour"},
		"unknown nested":     {with(func(m map[string]any) { shipTo(m)["phone"] = "1" }), "ship_to.phone"},
		"missing order":      {with(func(m map[string]any) { delete(m, "order_id") }), "order_id"},
		"order zero":         {with(func(m map[string]any) { m["order_id"] = 0 }), "order_id"},
		"order too big":      {[]byte(strings.Replace(string(stacktest.ParcelBody(5, 1, 100)), `"order_id":5`, `"order_id":9223372036854775808`, 1)), "order_id"},
		"order float":        {[]byte(strings.Replace(string(stacktest.ParcelBody(5, 1, 100)), `"order_id":5`, `"order_id":5.5`, 1)), "order_id"},
		"order string":       {with(func(m map[string]any) { m["order_id"] = "5" }), "order_id"},
		"parcel 1000":        {with(func(m map[string]any) { m["parcel_no"] = 1000 }), "parcel_no"},
		"weight 70001":       {with(func(m map[string]any) { m["weight_g"] = 70001 }), "weight_g"},
		"service":            {with(func(m map[string]any) { m["service"] = "teleport" }), "service"},
		"version 100":        {with(func(m map[string]any) { m["label_version"] = 100 }), "label_version"},
		"version null":       {with(func(m map[string]any) { m["label_version"] = nil }), "label_version"},
		"empty name":         {with(func(m map[string]any) { shipTo(m)["name"] = "" }), "ship_to.name"},
		"long city":          {with(func(m map[string]any) { shipTo(m)["city"] = strings.Repeat("x", 201) }), "ship_to.city"},
		"lower country":      {with(func(m map[string]any) { shipTo(m)["country"] = "de" }), "ship_to.country"},
		"unassigned country": {with(func(m map[string]any) { shipTo(m)["country"] = "ZZ" }), "ship_to.country"},
		"NUL in line1":       {with(func(m map[string]any) { shipTo(m)["line1"] = "a\x00b" }), "ship_to.line1"},
		"ship_to not object": {with(func(m map[string]any) { m["ship_to"] = "here" }), "ship_to"},
		"malformed":          {[]byte(`{"order_id":`), ""},
		"array":              {[]byte(`[]`), ""},
		"duplicate member":   {[]byte(`{"order_id":1,"order_id":2}`), ""},
		"invalid utf-8":      {[]byte("{\"order_id\":1,\"service\":\"\xff\"}"), ""},
		"trailing data":      {append(stacktest.ParcelBody(5, 1, 100), []byte(`{}`)...), ""},
		"deep":               {[]byte(strings.Repeat("[", 10000) + strings.Repeat("]", 10000)), ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := s.Create(tok, "v-"+strings.ReplaceAll(name, " ", "_"), c.body)
			p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
			require.NotEmpty(t, p.Errors)
			fields := []string{}
			for _, e := range p.Errors {
				fields = append(fields, e.Field)
			}
			require.Contains(t, fields, c.field)
		})
	}
	for _, ct := range []string{"text/plain", "", "application/json; charset=latin1"} {
		r := s.Do(http.MethodPost, "/v1/labels", tok, stacktest.ParcelBody(5, 1, 100), "Idempotency-Key", "ct", "Content-Type", ct)
		requireProblem(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type")
	}
	big := bytes.Repeat([]byte(" "), 64<<10+1)
	requireProblem(t, s.Create(tok, "big", big), http.StatusRequestEntityTooLarge, "payload_too_large")

	// Nothing was stored; the same key with a corrected body is new.
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM idempotency_keys`))
	require.Equal(t, http.StatusAccepted, s.Create(tok, "v-order_zero", stacktest.ParcelBody(5, 1, 100)).Status)
}

// Each refusal says what is actually wrong: the texts are pinned.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true})
	tok := s.Token("fulfilment")

	truncated := requireProblem(t, s.Create(tok, "t-1", []byte(`{"order_id":`)), http.StatusBadRequest, "invalid_request")
	require.Equal(t, "the request body is invalid: see errors", truncated.Detail)
	require.Len(t, truncated.Errors, 1)
	require.Equal(t, "", truncated.Errors[0].Field)
	require.Equal(t, "malformed JSON: the body ends before the JSON value is complete (truncated)", truncated.Errors[0].Message)
	for _, body := range []string{`{"order_id":1`, `{"order_id`, `{"order_id":1,"ship_to":{`, `[1,`} {
		p := requireProblem(t, s.Create(tok, "t-2", []byte(body)), http.StatusBadRequest, "invalid_request")
		require.Contains(t, p.Errors[0].Message, "truncated", body)
	}
	for _, body := range []string{"", "  \n"} {
		p := requireProblem(t, s.Create(tok, "t-3", []byte(body)), http.StatusBadRequest, "invalid_request")
		require.Equal(t, "the body is empty", p.Errors[0].Message)
	}
	bad := requireProblem(t, s.Create(tok, "t-4", []byte(`{"order_id":}`)), http.StatusBadRequest, "invalid_request")
	require.Contains(t, bad.Errors[0].Message, "malformed JSON: invalid character '}'")

	missing := requireProblem(t, s.Do(http.MethodGet, "/v1/label-requests", tok, nil), http.StatusBadRequest, "invalid_request")
	require.Equal(t, "the idempotency_key query parameter is missing", missing.Detail)
	require.Len(t, missing.Errors, 1)
	require.Equal(t, "idempotency_key", missing.Errors[0].Field)
	require.Equal(t, "is required: GET /v1/label-requests?idempotency_key=KEY", missing.Errors[0].Message)
	invalid := requireProblem(t, s.Do(http.MethodGet, "/v1/label-requests?idempotency_key=a&idempotency_key=b", tok, nil), http.StatusBadRequest, "invalid_request")
	require.Equal(t, "the idempotency_key query parameter is invalid", invalid.Detail)

	r := s.Do(http.MethodPost, "/v1/labels", tok, stacktest.ParcelBody(5, 1, 100), "Idempotency-Key", "t-5", "Content-Type", "text/plain")
	media := requireProblem(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type")
	require.Equal(t, "Unsupported media type", media.Title)
	require.Equal(t, "the body must be sent as Content-Type: application/json", media.Detail)
	require.Equal(t, "application/json", r.Header.Get("Accept-Post"))
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM idempotency_keys`), "a refusal stores nothing")
}

// A second caller with the same key makes an independent request; everything
// of the first caller reads as 404 to the second.
func TestKeysAreScopedPerCaller(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	a, b := s.Token("alpha"), s.Token("beta")
	body := stacktest.ParcelBody(918273, 1, 1450)
	ra := s.Accept(a, "label:918273:1:v1", body)
	rb := s.Accept(b, "label:918273:1:v1", body)
	require.NotEqual(t, ra.ID, rb.ID)
	fa := s.Final(a, ra.ID)
	fb := s.Final(b, rb.ID)
	require.Equal(t, "succeeded", fa.Status)
	require.Equal(t, "succeeded", fb.Status)
	la, lb := stacktest.Decode[map[string]any](t, fa.Label), stacktest.Decode[map[string]any](t, fb.Label)
	require.NotEqual(t, la["label_id"], lb["label_id"])
	require.NotEqual(t, la["carrier_label_id"], lb["carrier_label_id"])
	_, total := s.Carrier.Purchases("")
	require.Equal(t, 2, total)

	requireProblem(t, s.Do(http.MethodGet, "/v1/label-requests/"+ra.ID, b, nil), http.StatusNotFound, "not_found")
	requireProblem(t, s.Do(http.MethodGet, "/v1/labels/"+la["label_id"].(string), b, nil), http.StatusNotFound, "not_found")
	byKey := s.Do(http.MethodGet, "/v1/label-requests?idempotency_key=label:918273:1:v1", b, nil)
	require.Equal(t, http.StatusOK, byKey.Status)
	require.Equal(t, rb.ID, stacktest.Decode[labels.LabelRequest](t, byKey.Body).ID)
	requireProblem(t, s.Do(http.MethodGet, "/v1/label-requests?idempotency_key=unknown", b, nil), http.StatusNotFound, "not_found")
}

// 50 identical requests at once: one intent, one purchase, every answer the same request.
func TestConcurrentIdenticalRequests(t *testing.T) {
	t.Parallel()
	s, tok, body := stacktest.Example(t, stacktest.Opts{})
	var wg sync.WaitGroup
	ids := make([]string, 50)
	statuses := make([]int, 50)
	for i := range 50 {
		wg.Go(func() {
			r := s.Create(tok, "label:918273:1:v1", body)
			statuses[i] = r.Status
			if r.Status == http.StatusAccepted || r.Status == http.StatusCreated {
				var v map[string]any
				_ = json.Unmarshal(r.Body, &v)
				if id, ok := v["id"].(string); ok {
					ids[i] = id
				}
			}
		})
	}
	wg.Wait()
	first := ""
	for i, st := range statuses {
		require.Contains(t, []int{http.StatusAccepted, http.StatusCreated}, st)
		if ids[i] != "" {
			if first == "" {
				first = ids[i]
			}
			require.Equal(t, first, ids[i])
		}
	}
	require.Equal(t, 1, s.Count(`SELECT count(*) FROM label_intents`))
	s.WaitFinal(tok, first)
	n, total := s.Carrier.Purchases(carrierKeyOf(t, s, "fulfilment", "label:918273:1:v1"))
	require.Equal(t, 1, n)
	require.Equal(t, 1, total)
}

// An error after the key insert rolls back the whole accept: no key, no intent.
func TestAcceptIsOneTransaction(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{NoWorker: true, AfterKeyInsert: func(context.Context) error {
		return errors.New("injected failure after the key insert")
	}})
	tok := s.Token("fulfilment")
	r := s.Create(tok, "k", stacktest.ParcelBody(1, 1, 100))
	require.GreaterOrEqual(t, r.Status, 500)
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM idempotency_keys`))
	require.Equal(t, 0, s.Count(`SELECT count(*) FROM label_intents`))
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Many accepts at once, shared transactions and one per accept: repeats of a
// key, several keys for one parcel with the same body and with another body.
// Every key record has its intent, every parcel one intent, and every answer
// names the intent its parcel got.
func TestConcurrentMixedAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
	}{{"shared transactions", 0}, {"one transaction per accept", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stacktest.New(t, stacktest.Opts{NoWorker: true, AcceptBatch: tc.batch})
			tok := s.Token("fulfilment")
			type call struct {
				key    string
				order  int64
				weight int
			}
			var calls []call
			for o := range int64(30) {
				calls = append(calls, call{fmt.Sprintf("label:%d:1:v1", 100+o), 100 + o, 500}, call{fmt.Sprintf("label:%d:1:v1", 100+o), 100 + o, 500})
			}
			for i := range 10 {
				calls = append(calls, call{fmt.Sprintf("same-parcel-%d", i), 7, 500})
			}
			for i := range 6 {
				calls = append(calls, call{fmt.Sprintf("other-body-%d", i), 8, 500 + i})
			}
			answers := make([]stacktest.Response, len(calls))
			var wg sync.WaitGroup
			for i, c := range calls {
				wg.Go(func() { answers[i] = s.Create(tok, c.key, stacktest.ParcelBody(c.order, 1, c.weight)) })
			}
			wg.Wait()

			intentOf := map[int64]string{}
			require.NoError(t, func() error {
				rows, err := s.Pool.Query(context.Background(), `SELECT order_id, request_id FROM label_intents`)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var o int64
					var id string
					if err := rows.Scan(&o, &id); err != nil {
						return err
					}
					require.Empty(t, intentOf[o], "one intent per parcel")
					intentOf[o] = id
				}
				return rows.Err()
			}())
			require.Len(t, intentOf, 32)
			require.Equal(t, 0, s.Count(`SELECT count(*) FROM idempotency_keys k WHERE NOT EXISTS (SELECT 1 FROM label_intents i WHERE i.request_id = k.request_id)`),
				"no key record without its intent")
			require.Equal(t, 32, s.Count(`SELECT count(*) FROM idempotency_keys`))
			conflicts := 0
			for i, c := range calls {
				r := answers[i]
				if r.Status == http.StatusConflict {
					require.Equal(t, int64(8), c.order, string(r.Body))
					require.Equal(t, "parcel_already_labelled", stacktest.Decode[map[string]any](t, r.Body)["code"])
					conflicts++
					continue
				}
				require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
				require.Equal(t, intentOf[c.order], stacktest.Decode[labels.LabelRequest](t, r.Body).ID, "call %d (%s)", i, c.key)
			}
			require.Equal(t, 5, conflicts, "one body of parcel 8 wins, the five others are refused")
		})
	}
}
