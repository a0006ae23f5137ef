package carrier

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// KeyPrefix starts every carrier key, so a key seen on an invoice or in a log can
// be told apart from a caller's own key.
const KeyPrefix = "carrier:"

// MaxKeyLen is the longest Idempotency-Key the carrier accepts.
const MaxKeyLen = 255

// ErrInvalidKey is returned, wrapped, for a carrier key the carrier would refuse.
// It is a programming error, neither rejected nor retryable.
var ErrInvalidKey = errors.New("carrier: invalid idempotency key")

// DeriveKey returns the carrier idempotency key for a caller-scoped intent:
// "carrier:" + base64url-no-padding(SHA-256(callerID || 0x00 || idemKey)).
func DeriveKey(callerID, idemKey string) string {
	h := sha256.New()
	h.Write([]byte(callerID))
	h.Write([]byte{0})
	h.Write([]byte(idemKey))
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// ValidateKey reports whether key is 1–255 visible ASCII characters, the only
// keys the carrier takes.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte %#02x at %d is not visible ASCII", ErrInvalidKey, c, i)
		}
	}
	return nil
}
