package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/internal/fleet"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/proctest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// A worker killed (SIGKILL) while a delivery is in flight: the receiver has
// the request and has not answered. Another worker delivers the event again
// with the same webhook-id, signed with the secret `api webhook set` printed,
// once River's rescuer gives the stuck job back.
func TestWebhookWorkerKilledMidDelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries; waits for River's rescuer")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	bins := proctest.BuildT(t, "./cmd/api", "./cmd/worker", "./cmd/carrier")
	_, dbURL := dbtest.New(t)

	type got struct {
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	var deliveries []got
	arrived := make(chan struct{}, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		deliveries = append(deliveries, got{r.Header.Clone(), body})
		first := len(deliveries) == 1
		mu.Unlock()
		if first {
			arrived <- struct{}{}
			<-r.Context().Done() // never answers: the worker dies first
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	f := proctest.Fleet(t, fleet.Config{Bins: bins, Env: map[string]string{"DATABASE_URL": dbURL}})
	_, err := f.Start(ctx, fleet.Spec{Bin: "carrier"})
	require.NoError(t, err)
	cli := func(args ...string) string {
		t.Helper()
		res, err := f.Command(ctx, "api", map[string]string{"WEBHOOK_ALLOW_INSECURE": "true", "WEBHOOK_ALLOW_PRIVATE": "true", "WEBHOOK_ALLOW_UNSEALED": "true"}, args...)
		require.NoError(t, err)
		return res.LastLine()
	}
	token := cli("caller", "add", "shop")
	secret := cli("webhook", "set", "shop", receiver.URL+"/labels")
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)

	api, err := f.Start(ctx, fleet.Spec{Bin: "api"})
	require.NoError(t, err)
	startWorker := func(name string) *fleet.Proc {
		w, err := f.Start(ctx, fleet.Spec{Bin: "worker", Name: name, Env: map[string]string{
			"LEASE_DURATION": "3s", "CARRIER_TIMEOUT": "2s", "RETRY_BASE": "100ms", "WEBHOOK_TIMEOUT": "10s",
			"WEBHOOK_ALLOW_INSECURE": "true", "WEBHOOK_ALLOW_PRIVATE": "true", "WEBHOOK_ALLOW_UNSEALED": "true"}})
		require.NoError(t, err)
		return w
	}
	first := startWorker("worker-1")

	created := (&stacktest.Stack{T: t, URL: api.URL()}).Create(token, "label:31337:1:v1", stacktest.ParcelBody(31337, 1, 1450))
	require.Equal(t, http.StatusAccepted, created.Status, string(created.Body))

	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the first delivery never arrived")
	}
	require.NoError(t, f.Kill(first))
	<-first.Done()
	startWorker("worker-2")

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.Eventually(t, func() bool {
		var state string
		_ = pool.QueryRow(ctx, `SELECT state FROM webhook_events`).Scan(&state)
		return state == "delivered"
	}, 3*time.Minute, 200*time.Millisecond, "the event was not delivered again")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, deliveries, 2)
	ids := map[string]bool{}
	for _, d := range deliveries {
		ev, err := client.VerifyWebhook(secret, d.header, d.body, time.Now())
		require.NoError(t, err)
		require.Equal(t, client.EventSucceeded, ev.Type)
		ids[ev.ID] = true
	}
	require.Len(t, ids, 1, "the same webhook-id on both: %v", ids)
	attempts := dbtest.Scalar[int](t, pool, `SELECT attempts FROM webhook_events`)
	require.Equal(t, 2, attempts, "the killed attempt is counted")
}
