// Package caller owns the callers and their bearer tokens (tables callers and
// caller_tokens). Only the SHA-256 of a token is stored: a leaked table does not
// leak a usable token, and a token is looked up by its hash alone.
package caller

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/labelkit/labels/idempotency"
)

// ErrUnknownToken is returned for a token no caller has.
var ErrUnknownToken = errors.New("caller: unknown token")

// ErrInvalidName is returned by [Add] for a name the callers table refuses.
var ErrInvalidName = errors.New("caller: a name is 1 to 64 of A-Z a-z 0-9 . _ - and starts with a letter or digit")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// tokenPrefix makes tokens recognisable in secret scanners and logs.
const tokenPrefix = "lk_"

// Add creates caller name if it is new, adds a fresh token to it and returns the token.
func Add(ctx context.Context, db idempotency.DBTX, name string) (string, error) {
	if !nameRE.MatchString(name) {
		return "", ErrInvalidName
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	hash := sha256.Sum256([]byte(token))
	_, err := db.Exec(ctx, `
		WITH c AS (INSERT INTO callers (caller_id) VALUES ($1) ON CONFLICT DO NOTHING)
		INSERT INTO caller_tokens (token_hash, caller_id) VALUES ($2, $1)`, name, hash[:])
	if err != nil {
		return "", err
	}
	return token, nil
}

// Authenticate returns the caller a token belongs to.
func Authenticate(ctx context.Context, db idempotency.DBTX, token string) (string, error) {
	hash := sha256.Sum256([]byte(token))
	var id string
	err := db.QueryRow(ctx, `SELECT caller_id FROM caller_tokens WHERE token_hash = $1`, hash[:]).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrUnknownToken
	}
	return id, err
}
