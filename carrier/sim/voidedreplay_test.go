package sim_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
)

// A purchase key whose label was voided since replays the label with
// "status": "voided" and "voided_at", also after a restart on the state
// file; the client refuses it as label_voided. A live label has no status.
func TestReplayOfAVoidedLabelSaysSo(t *testing.T) {
	t.Parallel()
	b, path := withStateFile(t)
	l := b.mustBuy(t, "k1", purchase(1, "51147"))
	require.Empty(t, l.Status)
	resp, body := send(t, http.MethodPost, b.url+"/v1/labels", mustJSON(t, purchase(1, "51147")), "Idempotency-Key", "k1", "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, body, `"status"`, "a live label says nothing")

	b.clock.Set(day.Add(11 * time.Hour))
	b.mustVoid(t, "void:a", l.CarrierLabelID)

	for restarted := range 2 {
		if restarted == 1 {
			b = b.restart(t, path)
		}
		resp, body = send(t, http.MethodPost, b.url+"/v1/labels", mustJSON(t, purchase(1, "51147")), "Idempotency-Key", "k1", "Content-Type", "application/json")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var got carrier.Label
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.Equal(t, l.CarrierLabelID, got.CarrierLabelID)
		require.Equal(t, carrier.StatusVoided, got.Status)
		require.NotNil(t, got.VoidedAt)
		require.Equal(t, day.Add(11*time.Hour), got.VoidedAt.UTC())

		_, err := b.buy(t, "k1", purchase(1, "51147"))
		require.True(t, carrier.IsLabelVoided(err), "%v", err)
	}
}
