package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
)

// voidCall sends one void and returns the status, the body and whether the
// answer said Idempotent-Replayed: true.
func (b *testBundle) voidCall(t *testing.T, key, labelID string) (int, string, bool) {
	t.Helper()
	resp, body := send(t, http.MethodPost, b.url+"/v1/labels/"+labelID+"/void", "", "Idempotency-Key", key)
	return resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed") == "true"
}

// mustVoid voids a label that the simulator must void.
func (b *testBundle) mustVoid(t *testing.T, key, labelID string) *carrier.VoidedLabel {
	t.Helper()
	v, err := b.client.Void(context.Background(), key, labelID)
	require.NoError(t, err)
	return v
}

func TestVoid(t *testing.T) {
	t.Parallel()

	t.Run("VoidsOnceAndEveryRepeatIsAReplay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		b.clock.Set(day.Add(11 * time.Hour))

		v := b.mustVoid(t, "void:a", l.CarrierLabelID)
		require.False(t, v.Replayed)
		require.Equal(t, carrier.StatusVoided, v.Status)
		require.Equal(t, day.Add(11*time.Hour), v.VoidedAt)
		require.Equal(t, l.CarrierLabelID, v.CarrierLabelID)
		require.Equal(t, l.CostCents, v.CostCents)

		b.clock.Set(day.Add(12 * time.Hour))
		status, first, _ := b.voidCall(t, "void:a", l.CarrierLabelID)
		require.Equal(t, http.StatusOK, status)
		again := b.mustVoid(t, "void:a", l.CarrierLabelID)
		require.True(t, again.Replayed, "the same key: the same answer, replayed")
		require.Equal(t, v.VoidedAt, again.VoidedAt, "the time of the first void")
		other := b.mustVoid(t, "void:b", l.CarrierLabelID)
		require.True(t, other.Replayed, "voided before under another key: the same answer again")
		require.Equal(t, v.VoidedAt, other.VoidedAt)
		_, second, replayed := b.voidCall(t, "void:a", l.CarrierLabelID)
		require.True(t, replayed)
		require.Equal(t, first, second, "byte for byte")

		st := b.sim.Stats()
		require.Equal(t, int64(1), st.Voids)
		require.Equal(t, int64(4), st.VoidReplays)
		ps := b.sim.Purchases()
		require.Len(t, ps, 1)
		require.NotNil(t, ps[0].VoidedAt)
		require.Equal(t, day.Add(11*time.Hour), *ps[0].VoidedAt)

		status, body := b.do(t, "GET", "/sim/stats", "")
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, `"voids":1`)
	})

	t.Run("NoSuchLabelIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, err := b.client.Void(context.Background(), "void:a", "CL-99")
		require.True(t, carrier.IsNotFound(err), "%v", err)
		require.Zero(t, b.sim.Stats().Voids)
	})

	t.Run("AKeyIsRequired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{NoKeys: true})
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		status, body, _ := b.voidCall(t, "", l.CarrierLabelID)
		require.Equal(t, http.StatusBadRequest, status, "even a carrier that ignores purchase keys")
		require.Contains(t, body, "idempotency_key_invalid")
	})

	t.Run("AKeyOfAnotherLabelIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		l1 := b.mustBuy(t, "k1", purchase(1, "51147"))
		l2 := b.mustBuy(t, "k2", purchase(2, "51147"))
		b.mustVoid(t, "void:a", l1.CarrierLabelID)
		_, err := b.client.Void(context.Background(), "void:a", l2.CarrierLabelID)
		rej, ok := carrier.IsRejected(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, http.StatusUnprocessableEntity, rej.Status)
		require.Equal(t, "idempotency_key_reused", rej.Code)
		require.Nil(t, b.sim.Purchases()[1].VoidedAt)
	})

	t.Run("PastTheWindowIs409AndRepeatsSo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		bought := b.sim.Purchases()[0].PurchasedAt

		b.clock.Set(bought.Add(sim.DefaultVoidWindow + time.Second))
		_, err := b.client.Void(context.Background(), "void:a", l.CarrierLabelID)
		require.True(t, carrier.IsVoidWindowClosed(err), "%v", err)
		b.clock.Set(bought) // the same key gets the same answer, whatever the clock says now
		status, body, replayed := b.voidCall(t, "void:a", l.CarrierLabelID)
		require.Equal(t, http.StatusConflict, status)
		require.Contains(t, body, `"void_window_closed"`)
		require.True(t, replayed)

		// On the edge of the window, still voidable.
		b.clock.Set(bought.Add(sim.DefaultVoidWindow))
		b.mustVoid(t, "void:b", l.CarrierLabelID)
	})

	t.Run("TheWindowIsAnOption", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{VoidWindow: time.Hour})
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		b.sim.Advance(time.Hour + time.Second)
		_, err := b.client.Void(context.Background(), "void:a", l.CarrierLabelID)
		require.True(t, carrier.IsVoidWindowClosed(err), "%v", err)
		_, err = sim.New(&sim.Options{VoidWindow: -time.Second})
		require.Error(t, err)
	})

	t.Run("TheClockEndpointAgesLabels", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		status, body := b.do(t, "POST", "/sim/clock", `{"advance": "721h"}`)
		require.Equal(t, http.StatusOK, status, body)
		var c struct {
			Now    time.Time `json:"now"`
			Offset string    `json:"offset"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &c))
		require.Equal(t, "721h0m0s", c.Offset)
		require.Equal(t, b.clock.Now().Add(721*time.Hour).UTC(), c.Now)
		_, err := b.client.Void(context.Background(), "void:a", l.CarrierLabelID)
		require.True(t, carrier.IsVoidWindowClosed(err), "%v", err)

		status, _ = b.do(t, "POST", "/sim/clock", `{"offset": "0s"}`)
		require.Equal(t, http.StatusOK, status)
		_, err = b.client.Void(context.Background(), "void:b", l.CarrierLabelID)
		require.NoError(t, err, "back in the window")

		for _, bad := range []string{`{}`, `{"advance": "1h", "offset": "1h"}`, `{"advance": "soon"}`, `{"ahead": "1h"}`} {
			status, body := b.do(t, "POST", "/sim/clock", bad)
			require.Equal(t, http.StatusBadRequest, status, bad)
			require.Contains(t, body, "bad_clock", bad)
		}
		status, body = b.do(t, "GET", "/sim/clock", "")
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, `"offset":"0s"`)
	})

	t.Run("TheCreditIsOnTheInvoiceOfTheVoidsDay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.clock.Set(day.Add(10 * time.Hour))
		l1 := b.mustBuy(t, "k1", purchase(1, "51147"))
		b.clock.Set(day.Add(10*time.Hour + time.Minute))
		b.mustBuy(t, "k2", purchase(2, "51147"))
		before := invoice(t, b, day)

		b.clock.Set(day.Add(10*time.Hour + 2*time.Minute))
		b.mustVoid(t, "void:a", l1.CarrierLabelID)
		b.clock.Set(day.Add(10*time.Hour + 3*time.Minute))
		b.mustBuy(t, "k3", purchase(3, "51147"))

		raw, err := b.client.Invoice(context.Background(), day)
		require.NoError(t, err)
		require.Equal(t, sim.InvoiceHeader+",charge_type\n"+
			"INV-20261202,1,2026-12-02T10:00:00Z,CL-1,GRD000000001,k1,lr_1,595,USD,charge\n"+
			"INV-20261202,2,2026-12-02T10:01:00Z,CL-2,GRD000000002,k2,lr_2,595,USD,charge\n"+
			"INV-20261202,3,2026-12-02T10:02:00Z,CL-1,GRD000000001,k1,lr_1,-595,USD,void_credit\n"+
			"INV-20261202,4,2026-12-02T10:03:00Z,CL-3,GRD000000003,k3,lr_3,595,USD,charge\n", string(raw),
			"the credit in the order things happened; earlier lines keep their numbers")
		require.Len(t, before, 2)

		// A void on a later day credits that day's invoice; the day of the
		// purchase stays as it was billed.
		l2 := b.sim.Purchases()[1]
		b.clock.Set(day.Add(24*time.Hour + time.Hour))
		b.mustVoid(t, "void:b", l2.CarrierLabelID)
		raw, err = b.client.Invoice(context.Background(), day.Add(24*time.Hour))
		require.NoError(t, err)
		require.Equal(t, sim.InvoiceHeader+",charge_type\n"+
			"INV-20261203,1,2026-12-03T01:00:00Z,CL-2,GRD000000002,k2,lr_2,-595,USD,void_credit\n", string(raw))
		again, err := b.client.Invoice(context.Background(), day)
		require.NoError(t, err)
		require.Equal(t, 5, strings.Count(string(again), "\n"), "the day of the purchase gained no line")
	})

	t.Run("ACreditOfANoKeysLabelHasNoKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &sim.Options{NoKeys: true})
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		b.mustVoid(t, "void:a", l.CarrierLabelID)
		raw, err := b.client.Invoice(context.Background(), day)
		require.NoError(t, err)
		_, lines := linesOf(t, raw)
		require.Len(t, lines, 2)
		require.Equal(t, "", lines[1]["idempotency_key"])
		require.Equal(t, "void_credit", lines[1]["charge_type"])
		require.Equal(t, "lr_1", lines[1]["reference"])
	})

	t.Run("ResetForgetsVoids", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		b.mustVoid(t, "void:a", l.CarrierLabelID)
		b.sim.Advance(time.Hour)
		require.NoError(t, b.sim.Reset())
		require.Zero(t, b.sim.Stats().Voids)
		_, err := b.client.Void(context.Background(), "void:a", l.CarrierLabelID)
		require.True(t, carrier.IsNotFound(err), "%v", err)
		status, body := b.do(t, "GET", "/sim/clock", "")
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, `"offset":"0s"`)
	})

	t.Run("VoidsSurviveARestart", func(t *testing.T) {
		t.Parallel()
		b, path := withStateFile(t)
		l := b.mustBuy(t, "k1", purchase(1, "51147"))
		b.mustBuy(t, "k2", purchase(2, "51147"))
		v := b.mustVoid(t, "void:a", l.CarrierLabelID)
		inv, err := b.client.Invoice(context.Background(), day)
		require.NoError(t, err)
		require.Contains(t, string(inv), "void_credit")
		b2 := b.restart(t, path)
		require.Equal(t, int64(1), b2.sim.Stats().Voids)
		again := b2.mustVoid(t, "void:a", l.CarrierLabelID)
		require.True(t, again.Replayed)
		require.Equal(t, v.VoidedAt, again.VoidedAt)
		inv2, err := b2.client.Invoice(context.Background(), day)
		require.NoError(t, err)
		require.Equal(t, string(inv), string(inv2), "the same invoice, credit included")
	})
}

// The seed it gives drops the first reply and not the second, as a
// simulator with that seed shows call by call.
func TestSeedDroppingFirstReply(t *testing.T) {
	t.Parallel()
	seed, ok := sim.SeedDroppingFirstReply(0.5)
	require.True(t, ok)
	s, err := sim.New(&sim.Options{DropReplyRate: 0.5, Seed: seed})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = s.Close() })
	c := carrier.NewClient(srv.URL, &carrier.ClientOpts{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	_, err1 := c.Buy(context.Background(), "k1", purchase(1, "51147"))
	_, err2 := c.Buy(context.Background(), "k2", purchase(2, "51147"))
	var unknown *carrier.UnknownOutcomeError
	require.True(t, errors.As(err1, &unknown), "the first reply is dropped: %v", err1)
	require.NoError(t, err2)
	require.Len(t, s.Purchases(), 2, "both bought")
}
