package postgres_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/dbtest"
	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/postgres"
)

// ResealWebhookSecrets reads every secret once, batch by batch in id order,
// and rewrites only what its function changed and only where the row still
// holds what was read: a secret rotated in or deleted between the read and
// the write is left as it now is, and one added meanwhile is read in its
// turn.
func TestResealWebhookSecrets(t *testing.T) {
	t.Parallel()
	callers := []string{"a", "b", "c", "d", "e"}
	pool := fixture.DB(t, callers...)
	ctx := context.Background()
	for _, c := range callers {
		_, err := postgres.SetWebhook(ctx, pool, c, "https://hooks.example.com/"+c, postgres.Secret{Value: bytes.Repeat([]byte(c), 32)})
		require.NoError(t, err)
	}
	sealedValue := func(s postgres.StoredSecret) []byte { return append([]byte("sealed:"), s.Value...) }

	var seen []string
	n, err := postgres.ResealWebhookSecrets(ctx, pool, 2, func(s postgres.StoredSecret) (postgres.Secret, bool, error) {
		seen = append(seen, s.CallerID)
		switch {
		case s.CallerID == "b":
			// Changed by another session between the read and the write.
			_, err := pool.Exec(ctx, `UPDATE webhook_secrets SET secret = $2 WHERE secret_id = $1`, s.ID, bytes.Repeat([]byte("x"), 32))
			require.NoError(t, err)
		case s.CallerID == "c" && !s.Sealed:
			require.NoError(t, postgres.RotateWebhookSecret(ctx, pool, "c", postgres.Secret{Value: bytes.Repeat([]byte("C"), 32), Sealed: true}, time.Hour))
		case s.CallerID == "d":
			_, err := postgres.DeleteWebhook(ctx, pool, "d")
			require.NoError(t, err)
		}
		// The secret rotated in for c is sealed already: left.
		return postgres.Secret{Value: sealedValue(s), Sealed: true}, !s.Sealed, nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "d", "e", "c"}, seen, "every secret once, the one rotated in last")
	require.Equal(t, 3, n, "a, c's first secret and e; not b, changed meanwhile, nor d, deleted")

	rows := map[string][]postgres.Secret{}
	r, err := pool.Query(ctx, `SELECT caller_id, secret, sealed FROM webhook_secrets ORDER BY secret_id`)
	require.NoError(t, err)
	for r.Next() {
		var c string
		var s postgres.Secret
		require.NoError(t, r.Scan(&c, &s.Value, &s.Sealed))
		rows[c] = append(rows[c], s)
	}
	require.NoError(t, r.Err())
	require.Equal(t, map[string][]postgres.Secret{
		"a": {{Value: append([]byte("sealed:"), bytes.Repeat([]byte("a"), 32)...), Sealed: true}},
		"b": {{Value: bytes.Repeat([]byte("x"), 32)}},
		"c": {{Value: append([]byte("sealed:"), bytes.Repeat([]byte("c"), 32)...), Sealed: true}, {Value: bytes.Repeat([]byte("C"), 32), Sealed: true}},
		"e": {{Value: append([]byte("sealed:"), bytes.Repeat([]byte("e"), 32)...), Sealed: true}},
	}, rows)

	// Nothing to change: nothing written.
	n, err = postgres.ResealWebhookSecrets(ctx, pool, 500, func(s postgres.StoredSecret) (postgres.Secret, bool, error) {
		return s.Secret, false, nil
	})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 1, dbtest.Scalar[int](t, pool, `SELECT count(*) FROM webhook_secrets WHERE NOT sealed`))
	_, err = postgres.ResealWebhookSecrets(ctx, pool, 0, nil)
	require.Error(t, err)
}
