package postgres

import (
	"context"
	"errors"
)

// StoredSecret is one row of webhook_secrets as read for re-sealing.
type StoredSecret struct {
	ID       int64
	CallerID string
	Secret
}

// ResealFunc returns what to store in place of a stored secret, and whether
// that differs from what is stored.
type ResealFunc func(s StoredSecret) (next Secret, changed bool, err error)

// ResealWebhookSecrets passes every stored signing secret to reseal, batch
// rows at a time in secret_id order, and stores what it returns in place of
// each one it changed: one statement per batch, which writes a row only if
// it still holds what was read (a secret rotated away or deleted meanwhile
// is left as it is now). A secret added meanwhile has a higher id and is
// read in its turn. It returns how many rows it rewrote; an error of reseal
// stops it, with the batches before kept.
func ResealWebhookSecrets(ctx context.Context, db DB, batch int, reseal ResealFunc) (rewritten int, err error) {
	if batch <= 0 {
		return 0, errors.New("postgres: reseal batch must be positive")
	}
	after := int64(0)
	for {
		rows, err := db.Query(ctx, `SELECT secret_id, caller_id, secret, sealed FROM webhook_secrets
			WHERE secret_id > $1 ORDER BY secret_id LIMIT $2`, after, batch)
		if err != nil {
			return rewritten, err
		}
		var read []StoredSecret
		for rows.Next() {
			var s StoredSecret
			if err := rows.Scan(&s.ID, &s.CallerID, &s.Value, &s.Sealed); err != nil {
				rows.Close()
				return rewritten, err
			}
			read = append(read, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return rewritten, err
		}
		var ids []int64
		var olds, news [][]byte
		var oldSealed, newSealed []bool
		for _, s := range read {
			next, changed, err := reseal(s)
			if err != nil {
				return rewritten, err
			}
			if changed {
				ids = append(ids, s.ID)
				olds, oldSealed = append(olds, s.Value), append(oldSealed, s.Sealed)
				news, newSealed = append(news, next.Value), append(newSealed, next.Sealed)
			}
		}
		if len(ids) > 0 {
			tag, err := db.Exec(ctx, `
				UPDATE webhook_secrets w SET secret = n.secret, sealed = n.sealed
				  FROM unnest($1::bigint[], $2::bytea[], $3::boolean[], $4::bytea[], $5::boolean[])
				       AS n(secret_id, old, old_sealed, secret, sealed)
				 WHERE w.secret_id = n.secret_id AND w.secret = n.old AND w.sealed = n.old_sealed`,
				ids, olds, oldSealed, news, newSealed)
			if err != nil {
				return rewritten, err
			}
			rewritten += int(tag.RowsAffected())
		}
		if len(read) < batch {
			return rewritten, nil
		}
		after = read[len(read)-1].ID
	}
}
