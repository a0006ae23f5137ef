package carrier_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
)

const voidedJSON = `{"carrier_label_id":"CL-5521","tracking_no":"GRD000918273","cost_cents":612,"currency":"USD",` +
	`"purchased_at":"2026-12-02T10:00:01Z","status":"voided","voided_at":"2026-12-03T08:00:00Z"}`

func TestDeriveVoidKey(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("CL-5521"))
	want := "void:" + base64.RawURLEncoding.EncodeToString(sum[:])
	require.Equal(t, want, carrier.DeriveVoidKey("CL-5521"))
	require.Equal(t, carrier.DeriveVoidKey("CL-5521"), carrier.DeriveVoidKey("CL-5521"), "deterministic")
	require.NotEqual(t, carrier.DeriveVoidKey("CL-5521"), carrier.DeriveVoidKey("CL-5522"))
	require.NoError(t, carrier.ValidateKey(carrier.DeriveVoidKey("CL-5521")))
	require.Len(t, carrier.DeriveVoidKey(strings.Repeat("x", 300)), 48, "any label id makes a key of 48 characters")
	require.NotEqual(t, carrier.DeriveKey("", "CL-5521"), carrier.DeriveVoidKey("CL-5521"))
}

func TestVoid(t *testing.T) {
	t.Parallel()

	t.Run("VoidedSendsThePathAndKey", func(t *testing.T) {
		t.Parallel()
		var gotPath, gotRawPath, gotMethod, gotKey, gotAuth string
		b := setup(t, "s3cret", func(w http.ResponseWriter, r *http.Request) {
			gotPath, gotRawPath, gotMethod = r.URL.Path, r.URL.RawPath, r.Method
			gotKey, gotAuth = r.Header.Get("Idempotency-Key"), r.Header.Get("Authorization")
			answer(http.StatusOK, voidedJSON)(w, r)
		})
		v, err := b.client.Void(context.Background(), "void:k", "CL 55/21")
		require.NoError(t, err)
		require.Equal(t, http.MethodPost, gotMethod)
		require.Equal(t, "/v1/labels/CL 55/21/void", gotPath)
		require.Equal(t, "/v1/labels/CL%2055%2F21/void", gotRawPath, "the label id is one path segment")
		require.Equal(t, "void:k", gotKey)
		require.Equal(t, "Bearer s3cret", gotAuth)
		require.Equal(t, &carrier.VoidedLabel{
			Label: carrier.Label{CarrierLabelID: "CL-5521", TrackingNo: "GRD000918273", CostCents: 612, Currency: "USD",
				PurchasedAt: time.Date(2026, 12, 2, 10, 0, 1, 0, time.UTC)},
			Status:   "voided",
			VoidedAt: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC),
		}, v)
	})

	t.Run("ReplayedIsTold", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", answer(http.StatusOK, voidedJSON, "Idempotent-Replayed", "true"))
		v, err := b.client.Void(context.Background(), "void:k", "CL-5521")
		require.NoError(t, err)
		require.True(t, v.Replayed)
	})

	t.Run("NothingSentForABadKeyOrLabel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", answer(http.StatusOK, voidedJSON))
		_, err := b.client.Void(context.Background(), "", "CL-1")
		require.ErrorIs(t, err, carrier.ErrInvalidKey)
		_, err = b.client.Void(context.Background(), "void:k", "")
		require.Error(t, err)
		require.False(t, carrier.IsRetryable(err))
		require.Zero(t, b.calls.Load())
	})

	for _, tc := range []struct {
		name       string
		status     int
		body       string
		retryable  bool
		notFound   bool
		windowShut bool
	}{
		{"NotFoundIsFinal", 404, `{"code":"not_found","message":"no label CL-5521"}`, false, true, false},
		{"WindowClosedIsFinal", 409, `{"code":"void_window_closed","message":"too old"}`, false, false, true},
		{"OtherConflictIsInProgress", 409, `{"code":"in_progress","message":"busy"}`, true, false, false},
		{"BadRequestIsFinal", 400, `{"code":"idempotency_key_invalid","message":"bad"}`, false, false, false},
		{"UnprocessableIsFinal", 422, `{"code":"idempotency_key_reused","message":"other label"}`, false, false, false},
		{"ServerErrorIsUnknown", 503, `{"code":"unavailable","message":"later"}`, true, false, false},
		{"TooManyIsUnknown", 429, ``, true, false, false},
		{"OKWithoutVoidedIsUnknown", 200, labelJSON, true, false, false},
		{"OKUndecodableIsUnknown", 200, `{"carrier_label_id":`, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "", answer(tc.status, tc.body))
			v, err := b.client.Void(context.Background(), "void:k", "CL-5521")
			require.Nil(t, v)
			require.Error(t, err)
			require.Equal(t, tc.retryable, carrier.IsRetryable(err), "%v", err)
			require.Equal(t, tc.notFound, carrier.IsNotFound(err), "%v", err)
			require.Equal(t, tc.windowShut, carrier.IsVoidWindowClosed(err), "%v", err)
			if rej, ok := carrier.IsRejected(err); ok {
				require.Contains(t, rej.Error(), "carrier rejected the void")
			}
			var unknown *carrier.UnknownOutcomeError
			var inProgress *carrier.InProgressError
			if tc.retryable {
				require.True(t, errors.As(err, &unknown) || errors.As(err, &inProgress), "%T", err)
			}
		})
	}

	t.Run("RefusedConnectionIsUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", answer(http.StatusOK, voidedJSON))
		b.server.Close()
		_, err := b.client.Void(context.Background(), "void:k", "CL-5521")
		var unknown *carrier.UnknownOutcomeError
		require.ErrorAs(t, err, &unknown)
		require.True(t, carrier.IsRetryable(err))
	})
}
