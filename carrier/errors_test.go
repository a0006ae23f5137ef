package carrier

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIsRetryable(t *testing.T) {
	t.Parallel()

	rejected := &RejectedError{Status: 422, Code: "address_invalid"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"Nil", nil, false},
		{"Rejected", rejected, false},
		{"WrappedRejected", fmt.Errorf("buy: %w", rejected), false},
		{"InProgress", &InProgressError{Status: 409}, true},
		{"Unknown", &UnknownOutcomeError{Status: 503}, true},
		{"WrappedUnknown", fmt.Errorf("buy: %w", &UnknownOutcomeError{Err: errors.New("reset")}), true},
		{"Canceled", context.Canceled, true},
		{"DeadlineExceeded", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"InvalidKey", fmt.Errorf("%w: empty", ErrInvalidKey), false},
		{"Other", errors.New("boom"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, IsRetryable(tt.err))
		})
	}
}

func TestIsRejected(t *testing.T) {
	t.Parallel()

	rej, ok := IsRejected(fmt.Errorf("wrapped: %w", &RejectedError{Status: 400, Code: "bad"}))
	require.True(t, ok)
	require.Equal(t, "bad", rej.Code)

	_, ok = IsRejected(&UnknownOutcomeError{Status: 500})
	require.False(t, ok)
	_, ok = IsRejected(nil)
	require.False(t, ok)
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	require.Equal(t, 7*time.Second, parseRetryAfter("7", now))
	require.Equal(t, 90*time.Second, parseRetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now))
	require.Zero(t, parseRetryAfter("", now))
	require.Zero(t, parseRetryAfter("soon", now))
	require.Zero(t, parseRetryAfter("-3", now))
	require.Zero(t, parseRetryAfter(now.Add(-time.Minute).Format(http.TimeFormat), now))
}

func TestUnknownOutcomeErrorUnwraps(t *testing.T) {
	t.Parallel()

	err := &UnknownOutcomeError{Err: fmt.Errorf("post: %w", context.DeadlineExceeded)}
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "outcome unknown")
}
