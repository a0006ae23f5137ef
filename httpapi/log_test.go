package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/accept"
	"github.com/labelkit/labels/httpapi"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
)

// An address made of words that appear nowhere else, so that any trace of it
// in the log is a leak.
var secretAddress = map[string]string{
	"name": "Zebulon Quxworth", "line1": "77 Wobblegate Lane", "line2": "Flat Qv",
	"city": "Frobnitzham", "postal_code": "QX7 3ZZ",
}

func bodyWithAddress(order int64, weight int, country string) []byte {
	a := secretAddress
	return fmt.Appendf(nil, `{"order_id":%d,"parcel_no":1,"weight_g":%d,"service":"ground","ship_to":{"name":%q,"line1":%q,"line2":%q,"city":%q,"postal_code":%q,"country":%q}}`,
		order, weight, a["name"], a["line1"], a["line2"], a["city"], a["postal_code"], country)
}

// One line per request, with the request id, caller, key, intent, outcome and
// duration; never a token or any part of the ship_to address, whatever the
// answer.
func TestRequestLogLine(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	var buf logtest.Buffer
	h := httpapi.NewServer(httpapi.Deps{Opts: accept.Opts{Pool: pool}, Log: zerolog.New(&buf)})
	s := &stacktest.Stack{T: t, URL: serve(t, h)}
	tok, err := postgres.AddCaller(context.Background(), pool, "fulfilment")
	require.NoError(t, err)
	bogus := "lk_" + strings.Repeat("Nope", 10)

	type want struct {
		status           int
		route, outcome   string
		caller, key, rid string // rid: "intent" when the answer names one
	}
	var wants []want
	var intent string
	do := func(w want, r stacktest.Response) {
		t.Helper()
		require.Equal(t, w.status, r.Status, string(r.Body))
		if w.rid == "intent" {
			w.rid = intent
		}
		wants = append(wants, w)
	}
	created := s.Create(tok, "k-log", bodyWithAddress(1, 100, "DE"), "X-Request-Id", "trace-1")
	intent = stacktest.Decode[labels.LabelRequest](t, created.Body).ID
	do(want{202, "create_label", "new", "fulfilment", "k-log", "intent"}, created)
	do(want{202, "create_label", "replayed", "fulfilment", "k-log", "intent"}, s.Create(tok, "k-log", bodyWithAddress(1, 100, "DE")))
	do(want{422, "create_label", "key_reused", "fulfilment", "k-log", ""}, s.Create(tok, "k-log", bodyWithAddress(1, 200, "DE")))
	do(want{202, "create_label", "duplicate_intent", "fulfilment", "k-log-2", "intent"}, s.Create(tok, "k-log-2", bodyWithAddress(1, 100, "DE")))
	do(want{400, "create_label", "invalid_request", "fulfilment", "k-bad", ""}, s.Create(tok, "k-bad", bodyWithAddress(2, 100, "Nowhere")))
	do(want{401, "create_label", "unauthenticated", "", "", ""}, s.Create(bogus, "k-log", bodyWithAddress(1, 100, "DE")))
	do(want{200, "get_label_request", "", "fulfilment", "", "intent"}, s.Do(http.MethodGet, "/v1/label-requests/"+intent, tok, nil))
	require.Equal(t, http.StatusOK, s.Do(http.MethodGet, "/healthz", "", nil).Status) // not logged

	var requests []map[string]any
	for _, l := range buf.Lines(t, "") {
		if l["message"] == "request" {
			requests = append(requests, l)
		}
	}
	require.Len(t, requests, len(wants), buf.String())
	for i, w := range wants {
		l := requests[i]
		for _, f := range []string{"http_request_id", "method", "route", "status", "duration_ms", "caller", "key", "request_id", "outcome"} {
			require.Contains(t, l, f, "line %d: %v", i, l)
		}
		require.NotEmpty(t, l["http_request_id"], l)
		require.Equal(t, w.route, l["route"], l)
		require.Equal(t, float64(w.status), l["status"], l)
		require.Equal(t, w.caller, l["caller"], l)
		require.Equal(t, w.outcome, l["outcome"], l)
		require.Equal(t, w.rid, l["request_id"], l)
		if w.status != 401 {
			require.Equal(t, w.key, l["key"], l)
		}
		require.IsType(t, float64(0), l["duration_ms"], l)
	}
	require.Equal(t, "trace-1", requests[0]["http_request_id"], "a valid X-Request-Id is kept")

	all := buf.String()
	for field, v := range secretAddress {
		require.NotContains(t, all, v, "ship_to.%s in the log", field)
	}
	require.NotContains(t, all, tok)
	require.NotContains(t, all, tok[len(tok)-12:], "a piece of the token")
	require.NotContains(t, all, bogus)
	require.NotContains(t, all, "Bearer")
}
