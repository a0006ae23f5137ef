package carrier_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
)

// A purchase answered with a label the carrier has voided (a replay of a key
// whose label was voided since) is never a label: it is a final rejection,
// code label_voided. A live label may say "active" or nothing; a status the
// protocol does not name leaves the outcome unknown.
func TestBuyLabelStatus(t *testing.T) {
	t.Parallel()
	with := func(members string) string { return strings.TrimSuffix(labelJSON, "}") + "," + members + "}" }

	for name, body := range map[string]string{"none": labelJSON, "active": with(`"status":"active"`)} {
		b := setup(t, "", answer(http.StatusOK, body))
		l, err := b.client.Buy(context.Background(), testKey, testReq)
		require.NoError(t, err, name)
		require.Equal(t, "CL-5521", l.CarrierLabelID, name)
	}

	b := setup(t, "", answer(http.StatusOK, with(`"status":"voided","voided_at":"2026-12-03T08:00:00Z"`), "Idempotent-Replayed", "true"))
	l, err := b.client.Buy(context.Background(), testKey, testReq)
	require.Nil(t, l)
	rej, ok := carrier.IsRejected(err)
	require.True(t, ok, "%v", err)
	require.True(t, carrier.IsLabelVoided(err))
	require.False(t, carrier.IsRetryable(err))
	require.Equal(t, http.StatusOK, rej.Status)
	require.Equal(t, carrier.CodeLabelVoided, rej.Code)
	require.Equal(t, "the carrier voided CL-5521, the label this key bought, at 2026-12-03T08:00:00Z", rej.Message)

	b = setup(t, "", answer(http.StatusOK, with(`"status":"suspended"`)))
	_, err = b.client.Buy(context.Background(), testKey, testReq)
	var unknown *carrier.UnknownOutcomeError
	require.ErrorAs(t, err, &unknown)
	require.True(t, carrier.IsRetryable(err))
	require.False(t, carrier.IsLabelVoided(err))
	require.Contains(t, err.Error(), `status "suspended"`)

	// A void refused for good is not a voided purchase.
	require.False(t, carrier.IsLabelVoided(&carrier.RejectedError{Status: 409, Code: carrier.CodeLabelVoided, Op: "void"}))
}
