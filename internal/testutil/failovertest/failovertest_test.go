package failovertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/labelkit/labels/internal/testutil/failovertest"
)

func TestSmoke(t *testing.T) {
	if err := failovertest.Available(); err != nil {
		t.Skip(err)
	}
	f := failovertest.Start(t, failovertest.Options{})
	ctx := context.Background()
	u := f.CreateDatabase("ha")
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE TABLE t (x int); INSERT INTO t VALUES (1)`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(f.State(ctx))
	start := time.Now()
	old := f.KillPrimary()
	n := f.WaitPrimary(ctx)
	t.Logf("killed %s, %s primary after %s", old.Name, n.Name, time.Since(start))
	t.Log(f.State(ctx))
}
