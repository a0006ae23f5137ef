package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/stacktest"
)

// Every time the accept and the completion write is the database's: each
// row's created_at, expires_at and completed_at equal the now() of the
// transaction that wrote it (a trigger records both), never a process's
// clock read before the transaction began. The answers carry the same
// times: the 202's created_at is the intent's, the 201's the label's row's,
// and the saved body is the label as GET renders it from its row.
func TestTimesComeFromTheDatabaseClock(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Opts{})
	ctx := context.Background()
	for _, sql := range []string{
		`CREATE TABLE seen (tbl text, op text, row jsonb, tx_now timestamptz)`,
		`CREATE FUNCTION seen() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO seen VALUES (TG_TABLE_NAME, TG_OP, to_jsonb(NEW), now());
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER seen AFTER INSERT OR UPDATE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION seen()`,
		`CREATE TRIGGER seen AFTER INSERT OR UPDATE ON label_intents FOR EACH ROW EXECUTE FUNCTION seen()`,
		`CREATE TRIGGER seen AFTER INSERT ON label_intent_outbox FOR EACH ROW EXECUTE FUNCTION seen()`,
		`CREATE TRIGGER seen AFTER INSERT ON labels FOR EACH ROW EXECUTE FUNCTION seen()`,
	} {
		_, err := s.Pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}

	tok := s.Token("fulfilment")
	body := stacktest.ParcelBody(918273, 1, 1450)
	accepted := s.Accept(tok, "label:918273:1:v1", body)
	s.WaitFinal(tok, accepted.ID)

	// Each time written, against its transaction's now() (plus the
	// retention, for an expiry: 24 h, the API's and the worker's default).
	requireTxNow := func(tbl, op, column string, plus time.Duration) {
		t.Helper()
		rows, err := s.Pool.Query(ctx, `SELECT (row->>$3)::timestamptz, tx_now FROM seen
			WHERE tbl = $1 AND op = $2 AND row->>$3 IS NOT NULL AND (tbl <> 'idempotency_keys' OR op = 'INSERT' OR row->>'state' = 'completed')`,
			tbl, op, column)
		require.NoError(t, err)
		defer rows.Close()
		n := 0
		for rows.Next() {
			var v, now time.Time
			require.NoError(t, rows.Scan(&v, &now))
			require.True(t, v.Equal(now.Add(plus)), "%s %s %s: %s, the transaction's now() %s + %s", tbl, op, column, v, now, plus)
			n++
		}
		require.NoError(t, rows.Err())
		require.NotZero(t, n, "%s %s %s written", tbl, op, column)
	}
	requireTxNow("idempotency_keys", "INSERT", "created_at", 0)
	requireTxNow("idempotency_keys", "INSERT", "expires_at", 24*time.Hour)
	requireTxNow("label_intents", "INSERT", "created_at", 0)
	requireTxNow("label_intent_outbox", "INSERT", "created_at", 0)
	requireTxNow("labels", "INSERT", "created_at", 0)
	requireTxNow("idempotency_keys", "UPDATE", "expires_at", 24*time.Hour)
	requireTxNow("label_intents", "UPDATE", "completed_at", 0)

	// The answers carry the rows' times.
	intentAt := dbtest.Scalar[time.Time](t, s.Pool, `SELECT created_at FROM label_intents`)
	require.True(t, accepted.CreatedAt.Equal(intentAt), "202 created_at %s, the intent's %s", accepted.CreatedAt, intentAt)
	replay := s.Create(tok, "label:918273:1:v1", body)
	require.Equal(t, http.StatusCreated, replay.Status, string(replay.Body))
	label := stacktest.Decode[labels.Label](t, replay.Body)
	labelAt := dbtest.Scalar[time.Time](t, s.Pool, `SELECT created_at FROM labels`)
	require.True(t, label.CreatedAt.Equal(labelAt), "201 created_at %s, the label's row %s", label.CreatedAt, labelAt)
	require.Equal(t, string(replay.Body), string(s.Do(http.MethodGet, "/v1/labels/"+label.LabelID, tok, nil).Body),
		"the saved body is the label as rendered from its row")
}
