package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/internal/testutil/clitest"
)

// The binary voids, ages its labels through /sim/clock, refuses a void past
// SIM_VOID_WINDOW, and counts voids in /sim/stats; a void survives a restart
// with the state file.
func TestRunVoids(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SIM_VOID_WINDOW": "2h", "SIM_STATE_FILE": t.TempDir() + "/carrier.jsonl"}
	r := start(t, env)
	client := carrier.NewClient(r.url, nil)
	ctx := context.Background()
	a, err := client.Buy(ctx, carrier.DeriveKey("c", "a"), shipment(1, "51147"))
	require.NoError(t, err)
	b, err := client.Buy(ctx, carrier.DeriveKey("c", "b"), shipment(2, "51147"))
	require.NoError(t, err)

	v, err := client.Void(ctx, carrier.DeriveVoidKey(a.CarrierLabelID), a.CarrierLabelID)
	require.NoError(t, err)
	require.False(t, v.Replayed)

	resp, err := http.Post(r.url+"/sim/clock", "application/json", strings.NewReader(`{"advance": "2h1m"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = client.Void(ctx, carrier.DeriveVoidKey(b.CarrierLabelID), b.CarrierLabelID)
	require.True(t, carrier.IsVoidWindowClosed(err), "SIM_VOID_WINDOW=2h: %v", err)

	resp, err = http.Get(r.url + "/sim/stats")
	require.NoError(t, err)
	var st sim.Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	require.Equal(t, int64(1), st.Voids)
	require.Equal(t, 0, r.stop())

	r = start(t, env)
	again, err := carrier.NewClient(r.url, nil).Void(ctx, carrier.DeriveVoidKey(a.CarrierLabelID), a.CarrierLabelID)
	require.NoError(t, err)
	require.True(t, again.Replayed, "the void is kept in the state file")
	require.Equal(t, v.VoidedAt, again.VoidedAt)
	require.Equal(t, 0, r.stop())
}

func TestRunBadVoidWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"SIM_VOID_WINDOW": "a month"}, nil, `SIM_VOID_WINDOW "a month"`},
		{nil, []string{"--void-window", "0s"}, "must be positive"},
		{nil, []string{"--void-window", "-1h"}, "must not be negative"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"carrier"}, tc.args...), clitest.Env(tc.env), &stdout, &stderr)
		require.Equal(t, 2, code)
		require.Contains(t, stderr.String(), tc.want)
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"))
	}
	var stdout bytes.Buffer
	run(context.Background(), []string{"carrier", "--help"}, clitest.Env(nil), &stdout, &bytes.Buffer{})
	require.Contains(t, stdout.String(), "SIM_VOID_WINDOW")
}
