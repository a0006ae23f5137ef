package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/carrier/sim"
	"github.com/labelkit/labels/internal/testutil/clitest"
	"github.com/labelkit/labels/internal/testutil/logtest"
)

type running struct {
	url    string
	stderr *logtest.Buffer
	stop   func() int // cancels run's context and returns its exit code
}

// start runs the binary's run on 127.0.0.1:0 and waits until it answers.
func start(t *testing.T, env map[string]string, args ...string) *running {
	t.Helper()
	env["CARRIER_ADDR"] = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &logtest.Buffer{}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"carrier"}, args...), clitest.Env(env), &bytes.Buffer{}, stderr)
	}()
	var once sync.Once
	exit := -1
	stop := func() int {
		once.Do(func() {
			cancel()
			select {
			case exit = <-code:
			case <-time.After(20 * time.Second):
				t.Errorf("run did not return after its context ended; stderr:\n%s", stderr)
			}
		})
		return exit
	}
	t.Cleanup(func() { stop() })

	var addr string
	require.Eventually(t, func() bool {
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var line struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "listening" {
				addr = line.Addr
				return true
			}
		}
		return false
	}, time.Minute, 5*time.Millisecond, "no listening line; stderr:\n%s", stderr)
	url := "http://" + addr

	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 5*time.Millisecond)
	return &running{url: url, stderr: stderr, stop: stop}
}

func shipment(orderID int64, postalCode string) carrier.PurchaseRequest {
	return carrier.PurchaseRequest{
		Reference: "lr_e2e", OrderID: orderID, ParcelNo: 1, WeightG: 1450, Service: "ground",
		ShipTo: carrier.Address{Name: "E", Line1: "Heidestr. 17", City: "Köln", PostalCode: postalCode, Country: "DE"},
	}
}

func TestRunServesTheProtocol(t *testing.T) {
	t.Parallel()
	r := start(t, map[string]string{
		"CARRIER_TOKEN":           "s3cret",
		"SIM_REJECT_POSTAL_CODE":  "99999",
		"SIM_FAIL_RATE":           "1", // overridden by the flag below
		"SIM_DUPLICATE_LINE_RATE": "1",
	}, "--fail-rate", "0")
	client := carrier.NewClient(r.url, &carrier.ClientOpts{Token: "s3cret"})
	ctx := context.Background()
	key := carrier.DeriveKey("caller-1", "order-918273")

	label, err := client.Buy(ctx, key, shipment(918273, "51147"))
	require.NoError(t, err, "the flag beat SIM_FAIL_RATE=1")
	require.False(t, label.Replayed)
	require.Equal(t, "CL-1", label.CarrierLabelID)
	require.Equal(t, "GRD000918273", label.TrackingNo)
	require.Equal(t, int64(595), label.CostCents)

	replay, err := client.Buy(ctx, key, shipment(918273, "51147"))
	require.NoError(t, err)
	require.True(t, replay.Replayed)
	require.Equal(t, label.CarrierLabelID, replay.CarrierLabelID)

	_, err = client.Buy(ctx, carrier.DeriveKey("caller-1", "other"), shipment(1, "99999"))
	rej, ok := carrier.IsRejected(err)
	require.True(t, ok, "SIM_REJECT_POSTAL_CODE rejects: %v", err)
	require.Equal(t, "address_invalid", rej.Code)

	_, err = carrier.NewClient(r.url, nil).Buy(ctx, key, shipment(918273, "51147"))
	var unknown *carrier.UnknownOutcomeError
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, http.StatusUnauthorized, unknown.Status, "CARRIER_TOKEN is required")

	raw, err := client.Invoice(ctx, label.PurchasedAt)
	require.NoError(t, err)
	records, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	require.NoError(t, err)
	require.Len(t, records, 3, "header and the label billed twice (SIM_DUPLICATE_LINE_RATE=1)")
	require.Equal(t, sim.InvoiceHeader, strings.Join(records[0], ","))
	for _, rec := range records[1:] {
		require.Equal(t, []string{"CL-1", "GRD000918273", key, "lr_e2e", "595", "USD"}, rec[3:])
	}

	require.Equal(t, 0, r.stop())
	require.Contains(t, r.stderr.String(), `"message":"stopped"`)
}

func TestRunKeepsPurchasesInTheStateFile(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SIM_STATE_FILE": filepath.Join(t.TempDir(), "carrier.jsonl")}
	key := carrier.DeriveKey("caller-1", "k")

	r := start(t, env)
	first, err := carrier.NewClient(r.url, nil).Buy(context.Background(), key, shipment(7, "51147"))
	require.NoError(t, err)
	require.Equal(t, 0, r.stop())

	r = start(t, env)
	again, err := carrier.NewClient(r.url, nil).Buy(context.Background(), key, shipment(7, "51147"))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.CarrierLabelID, again.CarrierLabelID)
	require.Equal(t, 0, r.stop())
}

func TestRunShutdownWakesATimedOutPurchase(t *testing.T) {
	t.Parallel()
	r := start(t, map[string]string{"SIM_TIMEOUT_RATE": "1", "SIM_TIMEOUT_DELAY": "1h"})
	result := make(chan error, 1)
	go func() {
		_, err := carrier.NewClient(r.url, nil).Buy(context.Background(), "k", shipment(1, "51147"))
		result <- err
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get(r.url + "/sim/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st sim.Stats
		return json.NewDecoder(resp.Body).Decode(&st) == nil && st.InFlight == 1
	}, time.Minute, 5*time.Millisecond)

	require.Equal(t, 0, r.stop(), "an hour-long simulated timeout does not hold up the shutdown")
	require.NoError(t, <-result, "the purchase under way finished and answered")
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"carrier", "--help"}, {"carrier", "-h"}, {"carrier", "invoice", "--help"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, clitest.Env(nil), &stdout, &stderr)
		require.Equal(t, 0, code, "%v", args)
		require.Contains(t, stdout.String(), "Usage: carrier")
		require.Empty(t, stderr.String())
	}
	var stdout bytes.Buffer
	run(context.Background(), []string{"carrier", "--help"}, clitest.Env(nil), &stdout, &bytes.Buffer{})
	for _, name := range []string{"CARRIER_ADDR", "CARRIER_TOKEN", "SIM_LATENCY", "SIM_LATENCY_JITTER", "SIM_FAIL_RATE",
		"SIM_DROP_REPLY_RATE", "SIM_TIMEOUT_RATE", "SIM_TIMEOUT_DELAY", "SIM_REJECT_POSTAL_CODE", "SIM_NO_KEYS", "SIM_SEED",
		"SIM_STATE_FILE", "SIM_DUPLICATE_LINE_RATE", "SIM_AMOUNT_CHANGE_RATE", "SIM_FOREIGN_LINE_RATE", "SIM_CREDIT_RATE",
		"LOG_LEVEL", "LOG_FORMAT", "--latency", "--no-keys"} {
		require.Contains(t, stdout.String(), name)
	}
}

func TestRunBadValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"RateFromEnv", map[string]string{"SIM_FAIL_RATE": "2"}, nil, `SIM_FAIL_RATE "2"`},
		{"DurationFromFlag", nil, []string{"--latency", "soon"}, `--latency "soon"`},
		{"NegativeDuration", map[string]string{"SIM_TIMEOUT_DELAY": "-1s"}, nil, "SIM_TIMEOUT_DELAY"},
		{"Bool", map[string]string{"SIM_NO_KEYS": "maybe"}, nil, "SIM_NO_KEYS"},
		{"Seed", nil, []string{"--seed=x"}, "--seed"},
		{"LogFormat", map[string]string{"LOG_FORMAT": "xml"}, nil, "LOG_FORMAT"},
		{"LogLevel", map[string]string{"LOG_LEVEL": "loud"}, nil, "LOG_LEVEL"},
		{"Addr", map[string]string{"CARRIER_ADDR": "nonsense"}, nil, "nonsense"},
		{"BillingSum", map[string]string{"SIM_CREDIT_RATE": "0.6", "SIM_FOREIGN_LINE_RATE": "0.6"}, nil, "sum"},
		{"UnknownFlag", nil, []string{"--bogus"}, "bogus"},
		{"StrayArgument", nil, []string{"serve"}, "serve"},
		{"CorruptStateFile", map[string]string{"SIM_STATE_FILE": corruptFile(t)}, nil, "state file"},
		{"InvoiceWithoutDay", nil, []string{"invoice"}, "--day is required"},
		{"InvoiceBadDay", nil, []string{"invoice", "--day", "02.12.2026"}, "--day"},
		{"InvoiceNegativeLines", nil, []string{"invoice", "--day", "2026-12-02", "--lines", "-1"}, "--lines"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"carrier"}, tt.args...), clitest.Env(tt.env), &stdout, &stderr)
			require.Equal(t, 2, code)
			require.Empty(t, stdout.String())
			require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
			require.Contains(t, stderr.String(), tt.want)
		})
	}
}

func corruptFile(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "state.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("garbage\n"), 0o644))
	return path
}

func TestRunCannotListen(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"carrier"}, clitest.Env(map[string]string{"CARRIER_ADDR": ln.Addr().String()}), &bytes.Buffer{}, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "cannot listen")
}

func TestRunInvoice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, extra ...string) (string, sim.Truth) {
		out, truthPath := filepath.Join(dir, name+".csv"), filepath.Join(dir, name+".json")
		args := append([]string{"carrier", "invoice", "--day", "2026-12-02", "--lines", "200", "--out", out, "--truth", truthPath}, extra...)
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, clitest.Env(map[string]string{"SIM_CREDIT_RATE": "0.1"}), &stdout, &stderr)
		require.Equal(t, 0, code, stderr.String())
		require.Empty(t, stdout.String())
		require.Contains(t, stderr.String(), "invoice written")
		raw, err := os.ReadFile(out)
		require.NoError(t, err)
		tb, err := os.ReadFile(truthPath)
		require.NoError(t, err)
		var truth sim.Truth
		require.NoError(t, json.Unmarshal(tb, &truth))
		return string(raw), truth
	}

	raw, truth := write("a", "--duplicate-rate", "0.1", "--amount-change-rate", "0.1", "--foreign-rate", "0.1", "--seed", "5")
	require.Equal(t, 201, strings.Count(raw, "\n"))
	require.True(t, strings.HasPrefix(raw, sim.InvoiceHeader+"\nINV-20261202,1,"))
	require.Equal(t, 200, truth.Lines)
	for _, n := range []int{truth.Duplicates, truth.AmountChanges, truth.Foreign, truth.Credits} {
		require.Positive(t, n, "every rate given, flag or SIM_CREDIT_RATE, shows")
	}

	again, _ := write("b", "--duplicate-rate", "0.1", "--amount-change-rate", "0.1", "--foreign-rate", "0.1", "--seed", "5")
	require.Equal(t, raw, again, "the same seed writes the same file")

	var stdout bytes.Buffer
	code := run(context.Background(), []string{"carrier", "invoice", "--day", "2026-12-02", "--lines", "3"}, clitest.Env(nil), &stdout, &bytes.Buffer{})
	require.Equal(t, 0, code)
	require.Equal(t, 4, strings.Count(stdout.String(), "\n"), "--out defaults to stdout")
}
