package webhook

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// SecretKey encrypts the signing secrets at rest (WEBHOOK_SECRET_KEY):
// AES-256-GCM, with the caller's id as additional data, so that a sealed
// secret copied to another caller's row does not open. The zero value seals
// nothing: secrets are then stored raw.
type SecretKey struct {
	aead cipher.AEAD
}

// ParseSecretKey reads WEBHOOK_SECRET_KEY: the standard base64 of 32 bytes.
// An empty string is the zero SecretKey.
func ParseSecretKey(s string) (SecretKey, error) {
	if s == "" {
		return SecretKey{}, nil
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != 32 {
		return SecretKey{}, errors.New("want the base64 of 32 random bytes (openssl rand -base64 32)")
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return SecretKey{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return SecretKey{}, err
	}
	return SecretKey{aead: aead}, nil
}

// Set says whether the key seals.
func (k SecretKey) Set() bool { return k.aead != nil }

// Seal returns what to store for callerID's secret and whether it is sealed.
func (k SecretKey) Seal(callerID string, secret []byte) ([]byte, bool, error) {
	if k.aead == nil {
		return secret, false, nil
	}
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(secret)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, false, err
	}
	return k.aead.Seal(nonce, nonce, secret, []byte(callerID)), true, nil
}

// Open returns the secret of what is stored for callerID.
func (k SecretKey) Open(callerID string, stored []byte, sealed bool) ([]byte, error) {
	if !sealed {
		return stored, nil
	}
	if k.aead == nil {
		return nil, errors.New("the secret is sealed and WEBHOOK_SECRET_KEY is not set")
	}
	n := k.aead.NonceSize()
	if len(stored) < n {
		return nil, errors.New("the sealed secret is too short")
	}
	secret, err := k.aead.Open(nil, stored[:n], stored[n:], []byte(callerID))
	if err != nil {
		return nil, fmt.Errorf("the sealed secret does not open with WEBHOOK_SECRET_KEY: %w", err)
	}
	return secret, nil
}
