package httpapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/dbtest"
	"github.com/labelkit/labels/internal/fixture"
)

// One shared accept transaction with, side by side: new accepts, a key that
// exists, a parcel that is taken, and two accepts of the batch with the same
// key and with the same parcel. Each gets what the one-accept transaction
// would have done, and nothing is stored for those that were not new.
func TestAcceptManyOutcomes(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	fixture.Caller(t, pool, "c1")
	s := &Server{deps: Deps{Pool: pool, ClaimWait: time.Second, KeyRetention: time.Hour}}
	n := 0
	mk := func(key string, order int64) acceptIn {
		n++
		rec, in := fixture.Accept("c1", key, fmt.Sprintf("lr_many_%d", n), order)
		return acceptIn{rec: rec, intent: in}
	}
	first, err := s.acceptMany(ctx, []acceptIn{mk("k1", 1), mk("k2", 2)})
	require.NoError(t, err)
	require.Equal(t, []acceptOut{{sent: true, stored: true}, {sent: true, stored: true}}, first)

	batch := []acceptIn{
		mk("k3", 3), // new
		mk("k1", 1), // the key exists
		mk("k4", 2), // a new key for a parcel that is taken
		mk("k3", 3), // the same key again in the batch
		mk("k5", 3), // the same parcel again in the batch
		mk("k6", 6), // new
		mk("k2", 9), // the key exists (with another body)
	}
	outs, err := s.acceptMany(ctx, batch)
	require.NoError(t, err)
	stored, existed, taken, notSent := 0, 0, 0, 0
	for i, o := range outs {
		key, order := batch[i].rec.Key, batch[i].intent.Parcel.OrderID
		switch {
		case !o.sent:
			notSent++
			require.Contains(t, []string{"k3", "k5"}, key, "only the second of a key or parcel is left out")
			require.Equal(t, int64(3), order)
			require.Greater(t, i, 2)
		case o.stored:
			stored++
		case o.keyExisted:
			existed++
			require.Contains(t, []string{"k1", "k2"}, key)
		default:
			taken++
			require.Equal(t, "k4", key)
		}
	}
	require.Equal(t, []int{2, 2, 1, 2}, []int{stored, existed, taken, notSent})
	count := func(sql string) int {
		var c int
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&c))
		return c
	}
	require.Equal(t, 4, count(`SELECT count(*) FROM idempotency_keys`), "2 before, 2 new; none for a taken parcel")
	require.Equal(t, 4, count(`SELECT count(*) FROM label_intents`))
	require.Equal(t, 0, count(`SELECT count(*) FROM idempotency_keys k WHERE NOT EXISTS (SELECT 1 FROM label_intents i WHERE i.request_id = k.request_id)`))
	require.Equal(t, 0, count(`SELECT count(*) FROM idempotency_keys WHERE idem_key IN ('k4', 'k5')`))
	require.Equal(t, "lr_many_1", func() string {
		var id string
		require.NoError(t, pool.QueryRow(ctx, `SELECT request_id FROM idempotency_keys WHERE idem_key = 'k1'`).Scan(&id))
		return id
	}(), "an existing key is left as it was")
}

// The shared accept's generic plans, made on empty tables as on a fresh
// database, probe the tombstones (and, removing a key whose parcel was
// taken, the keys and intents) through their indexes, per accept: a plan
// made while the tombstones looked empty would otherwise read them whole
// for every batch, for as long as the connection lived.
func TestAcceptPlansProbeOnEmptyTables(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.New(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	settings := []any{"1000ms"}
	t.Run("accept", func(t *testing.T) {
		a, ts := "'{a}'", "'{2026-12-02T00:00:00Z}'"
		dbtest.RequireProbes(t, conn.Conn(), sqlAcceptSettings, settings, sqlAcceptMany,
			[]string{"text[]", "text[]", "bytea[]", "int2[]", "text[]", "timestamptz[]", "timestamptz[]", "bigint[]", "int[]", "int[]", "jsonb[]", "text[]"},
			[]string{a, a, `'{"\\x00"}'`, "'{1}'", a, ts, ts, "'{1}'", "'{1}'", "'{1}'", `'{"{}"}'`, a},
			"idempotency_tombstones")
	})
	t.Run("parcel taken", func(t *testing.T) {
		dbtest.RequireProbes(t, conn.Conn(), sqlAcceptSettings, settings, sqlUnclaimParcelTaken,
			[]string{"text[]", "text[]", "text[]"}, []string{"'{a}'", "'{b}'", "'{c}'"},
			"idempotency_keys", "label_intents")
	})
}
