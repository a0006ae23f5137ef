package carrier_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
)

var testReq = carrier.PurchaseRequest{
	Reference: "lr_01JEXAMPLE",
	OrderID:   918273,
	ParcelNo:  1,
	WeightG:   1450,
	Service:   "ground",
	ShipTo: carrier.Address{
		Name: "Erika Mustermann", Line1: "Heidestr. 17", City: "Köln", PostalCode: "51147", Country: "DE",
	},
}

const testKey = "carrier:saUX3tVE1aNnBoA9LtLgR9GpqlWEpY-QqXYsuBqj5Mo"

const labelJSON = `{"carrier_label_id":"CL-5521","tracking_no":"GRD000918273","cost_cents":612,"currency":"USD","purchased_at":"2026-12-02T10:00:01Z"}`

type testBundle struct {
	client *carrier.Client
	server *httptest.Server
	calls  *atomic.Int64
}

// setup starts a carrier stand-in that counts its calls and answers with handle.
func setup(t *testing.T, token string, handle http.HandlerFunc) *testBundle {
	t.Helper()
	calls := &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		handle(w, r)
	}))
	t.Cleanup(srv.Close)
	return &testBundle{
		client: carrier.NewClient(srv.URL+"/", &carrier.ClientOpts{Token: token}),
		server: srv,
		calls:  calls,
	}
}

func answer(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// hijack takes the raw connection after the request was read in full.
func hijack(t *testing.T, w http.ResponseWriter, r *http.Request) net.Conn {
	_, _ = io.Copy(io.Discard, r.Body)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return nil
	}
	return conn
}

// hangUp answers with raw, written as is on the connection, and closes it.
func hangUp(t *testing.T, raw string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn := hijack(t, w, r)
		if conn == nil {
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, raw)
	}
}

// requireNotRejected checks that err is not a rejection, and is retryable
// as retryable says.
func requireNotRejected(t *testing.T, err error, retryable bool) {
	t.Helper()
	require.Equal(t, retryable, carrier.IsRetryable(err), "%v", err)
	_, rejected := carrier.IsRejected(err)
	require.False(t, rejected)
}

func TestBuySuccess(t *testing.T) {
	t.Parallel()

	t.Run("CreatedSendsTheProtocolHeadersAndBody", func(t *testing.T) {
		t.Parallel()
		var gotHeader http.Header
		var gotPath, gotMethod string
		var gotBody carrier.PurchaseRequest
		b := setup(t, "s3cret", func(w http.ResponseWriter, r *http.Request) {
			gotHeader, gotPath, gotMethod = r.Header.Clone(), r.URL.Path, r.Method
			if err := json.NewDecoder(r.Body).Decode(&gotBody); err != nil {
				t.Errorf("decode: %v", err)
			}
			answer(http.StatusCreated, labelJSON)(w, r)
		})

		label, err := b.client.Buy(context.Background(), testKey, testReq)
		require.NoError(t, err)
		require.Equal(t, &carrier.Label{
			CarrierLabelID: "CL-5521",
			TrackingNo:     "GRD000918273",
			CostCents:      612,
			Currency:       "USD",
			PurchasedAt:    time.Date(2026, 12, 2, 10, 0, 1, 0, time.UTC),
		}, label)
		require.Equal(t, http.MethodPost, gotMethod)
		require.Equal(t, "/v1/labels", gotPath)
		require.Equal(t, "Bearer s3cret", gotHeader.Get("Authorization"))
		require.Equal(t, testKey, gotHeader.Get("Idempotency-Key"))
		require.Equal(t, "application/json", gotHeader.Get("Content-Type"))
		require.Equal(t, testReq, gotBody)
	})

	t.Run("OKIsAReplay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", answer(http.StatusOK, labelJSON))
		label, err := b.client.Buy(context.Background(), testKey, testReq)
		require.NoError(t, err)
		require.True(t, label.Replayed)
		require.Equal(t, "CL-5521", label.CarrierLabelID)
	})

	t.Run("NoTokenNoAuthorization", func(t *testing.T) {
		t.Parallel()
		var auth []string
		b := setup(t, "", func(w http.ResponseWriter, r *http.Request) {
			auth = r.Header.Values("Authorization")
			answer(http.StatusCreated, labelJSON)(w, r)
		})
		_, err := b.client.Buy(context.Background(), testKey, testReq)
		require.NoError(t, err)
		require.Empty(t, auth)
	})
}

func TestBuyRejected(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		status      int
		body        string
		wantCode    string
		wantMessage string
	}{
		{"BadRequest", 400, `{"code":"bad_request","message":"weight_g missing"}`, "bad_request", "weight_g missing"},
		{"NotFound", 404, `{"code":"service_not_found","message":"no such service"}`, "service_not_found", "no such service"},
		{"Unprocessable", 422, `{"code":"address_invalid","message":"postal code 99999 does not exist"}`, "address_invalid", "postal code 99999 does not exist"},
		{"NotJSON", 422, `<html>nope</html>`, "unknown", "<html>nope</html>"},
		{"JSONOfAnotherShape", 400, `{"error":"bad"}`, "unknown", `{"error":"bad"}`},
		{"EmptyBody", 404, ``, "unknown", "Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "", answer(tt.status, tt.body))
			label, err := b.client.Buy(context.Background(), testKey, testReq)
			require.Nil(t, label)
			rej, ok := carrier.IsRejected(err)
			require.True(t, ok, "got %T %v", err, err)
			require.Equal(t, &carrier.RejectedError{Status: tt.status, Code: tt.wantCode, Message: tt.wantMessage}, rej)
			require.False(t, carrier.IsRetryable(err))
		})
	}
}

func TestBuyInProgress(t *testing.T) {
	t.Parallel()

	b := setup(t, "", answer(http.StatusConflict, `{"code":"in_progress","message":"still buying"}`, "Retry-After", "2"))
	_, err := b.client.Buy(context.Background(), testKey, testReq)
	var inProgress *carrier.InProgressError
	require.ErrorAs(t, err, &inProgress)
	require.Equal(t, &carrier.InProgressError{Status: 409, Code: "in_progress", Message: "still buying", RetryAfter: 2 * time.Second}, inProgress)
	requireNotRejected(t, err, true)
}

func requireUnknown(t *testing.T, err error, status int) *carrier.UnknownOutcomeError {
	t.Helper()
	var unknown *carrier.UnknownOutcomeError
	require.ErrorAs(t, err, &unknown, "got %T %v", err, err)
	require.Equal(t, status, unknown.Status)
	require.NotNil(t, unknown.Err)
	requireNotRejected(t, err, true)
	return unknown
}

func TestBuyUnknownOutcomeStatuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name           string
		status         int
		body           string
		headers        []string
		wantRetryAfter time.Duration
	}{
		{"RequestTimeout", 408, ``, nil, 0},
		{"TooManyRequests", 429, `{"code":"rate_limited"}`, []string{"Retry-After", "7"}, 7 * time.Second},
		{"InternalServerError", 500, `oops`, nil, 0},
		{"BadGateway", 502, ``, nil, 0},
		{"ServiceUnavailable", 503, `{"code":"unavailable"}`, []string{"Retry-After", "1"}, time.Second},
		{"GatewayTimeout", 504, ``, nil, 0},
		{"UnexpectedUnauthorized", 401, `{"code":"unauthorized"}`, nil, 0},
		{"UnexpectedTeapot", 418, ``, nil, 0},
		{"UnexpectedNoContent", 204, ``, nil, 0},
		{"UnexpectedRedirect", 302, ``, []string{"Location", "/elsewhere"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "", answer(tt.status, tt.body, tt.headers...))
			_, err := b.client.Buy(context.Background(), testKey, testReq)
			unknown := requireUnknown(t, err, tt.status)
			require.Equal(t, tt.wantRetryAfter, unknown.RetryAfter)
			require.Equal(t, int64(1), b.calls.Load(), "one call, no hidden retry or redirect")
		})
	}
}

func TestBuyUnknownOutcomeBodies(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		status int
		body   string
	}{
		{"NotJSON", 201, `<html>created</html>`},
		{"TrailingGarbage", 201, labelJSON + `}`},
		{"WrongType", 200, `{"carrier_label_id":5521}`},
		{"EmptyObject", 201, `{}`},
		{"Null", 201, `null`},
		{"MissingTrackingNo", 201, `{"carrier_label_id":"CL-1","cost_cents":1,"currency":"USD","purchased_at":"2026-12-02T10:00:01Z"}`},
		{"MissingPurchasedAt", 200, `{"carrier_label_id":"CL-1","tracking_no":"GRD1","cost_cents":1,"currency":"USD"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "", answer(tt.status, tt.body))
			_, err := b.client.Buy(context.Background(), testKey, testReq)
			requireUnknown(t, err, tt.status)
		})
	}

	t.Run("Truncated", func(t *testing.T) {
		t.Parallel()
		// Promise the whole label, send half of it, hang up.
		b := setup(t, "", hangUp(t, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 132\r\n\r\n"+labelJSON[:60]))
		_, err := b.client.Buy(context.Background(), testKey, testReq)
		unknown := requireUnknown(t, err, 201)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "%v", unknown)
	})

	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		huge := `{"carrier_label_id":"CL-1","pad":"` + stringOf('x', 1<<20) + `"}`
		b := setup(t, "", answer(201, huge))
		_, err := b.client.Buy(context.Background(), testKey, testReq)
		requireUnknown(t, err, 201)
	})
}

func stringOf(c byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

func TestBuyUnknownOutcomeTransport(t *testing.T) {
	t.Parallel()

	t.Run("ConnectionDroppedAfterTheRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", hangUp(t, ""))
		_, err := b.client.Buy(context.Background(), testKey, testReq)
		requireUnknown(t, err, 0)
		require.Equal(t, int64(1), b.calls.Load())
	})

	t.Run("ConnectionReset", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", func(w http.ResponseWriter, r *http.Request) {
			conn := hijack(t, w, r)
			if conn == nil {
				return
			}
			// Linger 0 makes Close send RST instead of FIN.
			_ = conn.(*net.TCPConn).SetLinger(0)
			_ = conn.Close()
		})
		_, err := b.client.Buy(context.Background(), testKey, testReq)
		requireUnknown(t, err, 0)
	})

	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())

		_, err = carrier.NewClient("http://"+addr, nil).Buy(context.Background(), testKey, testReq)
		unknown := requireUnknown(t, err, 0)
		require.ErrorIs(t, err, syscall.ECONNREFUSED, "%v", unknown)
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done() // the carrier is busy until the client hangs up
		})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := b.client.Buy(ctx, testKey, testReq)
		requireUnknown(t, err, 0)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("CallerCanceled", func(t *testing.T) {
		t.Parallel()
		reached := make(chan struct{})
		b := setup(t, "", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			close(reached)
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-reached
			cancel()
		}()
		_, err := b.client.Buy(ctx, testKey, testReq)
		requireUnknown(t, err, 0)
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestBuyInvalidKeyIsNotSent(t *testing.T) {
	t.Parallel()

	b := setup(t, "", answer(http.StatusCreated, labelJSON))
	for _, key := range []string{"", "with space", stringOf('k', 256), "ünïcode"} {
		_, err := b.client.Buy(context.Background(), key, testReq)
		require.ErrorIs(t, err, carrier.ErrInvalidKey)
		requireNotRejected(t, err, false)
	}
	require.Zero(t, b.calls.Load())
}

func TestInvoice(t *testing.T) {
	t.Parallel()

	const csv = "invoice_no,line_no,billed_at,carrier_label_id,tracking_no,idempotency_key,reference,cost_cents,currency\n" +
		"INV-20261202,1,2026-12-02T10:00:01Z,CL-5521,GRD000918273,carrier:Zm9v,lr_01JEXAMPLE,612,USD\n"

	t.Run("OK", func(t *testing.T) {
		t.Parallel()
		var gotQuery, gotPath, gotAuth string
		b := setup(t, "tok", func(w http.ResponseWriter, r *http.Request) {
			gotQuery, gotPath, gotAuth = r.URL.Query().Get("date"), r.URL.Path, r.Header.Get("Authorization")
			w.Header().Set("Content-Type", "text/csv")
			_, _ = io.WriteString(w, csv)
		})
		got, err := b.client.Invoice(context.Background(), time.Date(2026, 12, 2, 23, 59, 0, 0, time.UTC))
		require.NoError(t, err)
		require.Equal(t, csv, string(got))
		require.Equal(t, "/v1/invoices", gotPath)
		require.Equal(t, "2026-12-02", gotQuery)
		require.Equal(t, "Bearer tok", gotAuth)
	})

	t.Run("CalendarDateOfTheGivenLocation", func(t *testing.T) {
		t.Parallel()
		var gotQuery string
		b := setup(t, "", func(w http.ResponseWriter, r *http.Request) {
			gotQuery = r.URL.Query().Get("date")
		})
		berlin := time.FixedZone("CET", 3600)
		_, err := b.client.Invoice(context.Background(), time.Date(2026, 12, 2, 0, 30, 0, 0, berlin))
		require.NoError(t, err)
		require.Equal(t, "2026-12-02", gotQuery)
	})

	t.Run("BadRequestIsRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", answer(400, `{"code":"invalid_date","message":"date must be YYYY-MM-DD"}`))
		_, err := b.client.Invoice(context.Background(), time.Now())
		rej, ok := carrier.IsRejected(err)
		require.True(t, ok)
		require.Equal(t, "invalid_date", rej.Code)
	})

	t.Run("ServerErrorIsAnError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", answer(503, `busy`, "Retry-After", "3"))
		_, err := b.client.Invoice(context.Background(), time.Now())
		unknown := requireUnknown(t, err, 503)
		require.Equal(t, 3*time.Second, unknown.RetryAfter)
	})

	t.Run("Truncated", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", hangUp(t, "HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\nContent-Length: 1000\r\n\r\n"+csv))
		_, err := b.client.Invoice(context.Background(), time.Now())
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	})
}

// TestIdleConnectionsForInFlight checks that a client made for n calls in
// flight keeps n connections open between two waves of n concurrent calls,
// where the earlier fixed 128 made the second wave dial again.
func TestIdleConnectionsForInFlight(t *testing.T) {
	const n = 200
	var dials atomic.Int64
	arrived := make(chan struct{}, n)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		answer(http.StatusCreated, labelJSON)(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	client := carrier.NewClient(srv.URL, &carrier.ClientOpts{InFlight: n})

	// wave makes n calls that are all in flight at once before any answers.
	wave := func() {
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := client.Buy(t.Context(), testKey, testReq)
				errs <- err
			}()
		}
		for range n {
			<-arrived
		}
		for range n {
			release <- struct{}{}
		}
		for range n {
			require.NoError(t, <-errs)
		}
	}
	wave()
	require.EqualValues(t, n, dials.Load(), "the first wave opens a connection per call")
	wave()
	require.EqualValues(t, n, dials.Load(), "the second wave finds every connection open")
}

// The label document is optional and goes whole: an answer that names a URL,
// a media type and a size has one; one that names part of it has none, and
// is still a label bought.
func TestBuyLabelDocument(t *testing.T) {
	t.Parallel()
	base := strings.TrimSuffix(labelJSON, "}")
	for _, c := range []struct {
		name, extra string
		has         bool
	}{
		{"whole", `,"label_url":"https://c.example/v1/labels/CL-5521/document","label_content_type":"application/zpl","label_size_bytes":812`, true},
		{"empty document", `,"label_url":"https://c.example/d","label_content_type":"application/pdf","label_size_bytes":0`, true},
		{"none", ``, false},
		{"no size", `,"label_url":"https://c.example/d","label_content_type":"application/pdf"`, false},
		{"no type", `,"label_url":"https://c.example/d","label_size_bytes":812`, false},
		{"no url", `,"label_content_type":"application/pdf","label_size_bytes":812`, false},
		{"negative size", `,"label_url":"https://c.example/d","label_content_type":"application/pdf","label_size_bytes":-1`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "", answer(http.StatusCreated, base+c.extra+"}"))
			label, err := b.client.Buy(context.Background(), testKey, testReq)
			require.NoError(t, err)
			require.Equal(t, "CL-5521", label.CarrierLabelID)
			require.Equal(t, c.has, label.HasDocument())
			if c.name == "whole" {
				require.Equal(t, "https://c.example/v1/labels/CL-5521/document", label.LabelURL)
				require.Equal(t, "application/zpl", label.LabelContentType)
				require.Equal(t, int64(812), *label.LabelSizeBytes)
			}
		})
	}
}
