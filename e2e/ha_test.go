package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/failovertest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
	"github.com/labelkit/labels/postgres"
)

// On a formation run by pg_auto_failover (a synchronous standby), the
// primary's machine is lost right after the API answered 202 and right
// after an intent's completion committed, without waiting for anything to
// replay: the monitor promotes the standby, which holds both, and the
// pipeline carries on there.
func TestAcknowledgedSurvivesPrimaryLoss(t *testing.T) {
	failovertest.SkipUnlessAvailable(t)
	f := failovertest.Start(t, failovertest.Options{})
	t.Parallel()
	cfg, err := postgres.PoolConfig(f.CreateDatabase("labels"))
	require.NoError(t, err)
	pool := migratedPool(t, cfg)
	s := stacktest.New(t, stacktest.Opts{Pool: pool, RetryBase: 50 * time.Millisecond, LeaseDuration: 5 * time.Second, CarrierTimeout: 4 * time.Second})
	tok := s.Token("fulfilment")

	completed := s.Accept(tok, "completed", stacktest.ParcelBody(200, 1, 100))
	require.Contains(t, string(s.WaitFinal(tok, completed.ID).Body), `"status":"succeeded"`)
	begun := s.Carrier.StallFirst(s.Carrier.Calls() + 1)
	accepted := s.Accept(tok, "accepted", stacktest.ParcelBody(201, 1, 100))
	waitUntil(t, "the purchase to reach the carrier", begun)

	old := f.KillPrimary()
	close(s.Carrier.Release)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	promoted := f.WaitPrimary(ctx)
	require.NotEqual(t, old.Name, promoted.Name)
	conn, err := pgx.Connect(ctx, promoted.URL("labels"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	require.Equal(t, "succeeded", dbtest.Scalar[string](t, conn, `SELECT status FROM label_intents WHERE request_id = $1`, completed.ID),
		"the completion committed before the loss is on the promoted standby")
	require.Equal(t, 1, dbtest.Scalar[int](t, conn, `SELECT count(*) FROM label_intents WHERE request_id = $1`, accepted.ID),
		"the intent answered 202 before the loss is on the promoted standby")

	require.Contains(t, string(s.WaitFinal(tok, accepted.ID).Body), `"status":"succeeded"`)
	_, bought := s.Carrier.Purchases("")
	require.Equal(t, 2, bought, "one purchase per intent")
}
