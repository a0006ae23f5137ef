package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"regexp"

	"github.com/jackc/pgx/v5"
)

// ErrUnknownToken is returned for a token no caller has.
var ErrUnknownToken = errors.New("postgres: unknown token")

// ErrInvalidCallerName is returned by [AddCaller] for a name the callers table refuses.
var ErrInvalidCallerName = errors.New("a caller name is 1 to 64 of A-Z a-z 0-9 . _ - and starts with a letter or digit")

var callerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// tokenPrefix makes tokens recognisable in secret scanners and logs.
const tokenPrefix = "lk_"

// AddCaller creates caller name if it is new, adds a fresh bearer token to it
// and returns the token. Only the token's SHA-256 is stored: a leaked table
// does not leak a usable token.
func AddCaller(ctx context.Context, db DB, name string) (string, error) {
	if !callerNameRE.MatchString(name) {
		return "", ErrInvalidCallerName
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

// Authenticate returns the caller a token belongs to, looked up by its hash.
func Authenticate(ctx context.Context, db DB, token string) (string, error) {
	hash := sha256.Sum256([]byte(token))
	var id string
	err := db.QueryRow(ctx, `SELECT caller_id FROM caller_tokens WHERE token_hash = $1`, hash[:]).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrUnknownToken
	}
	return id, err
}
