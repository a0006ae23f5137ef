package webhook

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// ErrUnsealed is wrapped by the errors of a secret that would be stored or
// read raw without the development allowance.
var ErrUnsealed = errors.New("webhook signing secrets are sealed with WEBHOOK_SECRET_KEY; raw ones are stored and read only with WEBHOOK_ALLOW_UNSEALED=true (development)")

// SecretKey seals the signing secrets at rest and opens them:
// AES-256-GCM under WEBHOOK_SECRET_KEY, with the caller's id as additional
// data, so that a sealed secret copied to another caller's row does not
// open. During a key rotation it opens the secrets sealed under the previous
// key too (WEBHOOK_SECRET_KEY_OLD) and Reseal moves them to the current one.
//
// A secret is stored or read raw only with the development allowance
// (WEBHOOK_ALLOW_UNSEALED): the zero value seals nothing, refuses to store a
// secret and opens no raw one.
type SecretKey struct {
	aead     cipher.AEAD // WEBHOOK_SECRET_KEY: seals and opens
	old      cipher.AEAD // WEBHOOK_SECRET_KEY_OLD: opens only
	unsealed bool        // WEBHOOK_ALLOW_UNSEALED
}

// SecretKeys is the configuration a SecretKey is made of.
type SecretKeys struct {
	Key           string // WEBHOOK_SECRET_KEY: the base64 of 32 bytes; empty: none
	Old           string // WEBHOOK_SECRET_KEY_OLD: the previous key, during a rotation
	AllowUnsealed bool   // WEBHOOK_ALLOW_UNSEALED: raw secrets stored and read (development)
}

// Env reads the environment: the binaries' cli.Env, which remembers a bad
// value for the start-up checks.
type Env interface {
	String(name, def string) string
	Bool(name string, def bool) bool
}

// SecretKeysFromEnv reads WEBHOOK_SECRET_KEY, WEBHOOK_SECRET_KEY_OLD and
// WEBHOOK_ALLOW_UNSEALED. The api seals the secrets it stores and the
// worker opens them to sign, so both read the same three.
func SecretKeysFromEnv(e Env) SecretKeys {
	return SecretKeys{
		Key:           e.String("WEBHOOK_SECRET_KEY", ""),
		Old:           e.String("WEBHOOK_SECRET_KEY_OLD", ""),
		AllowUnsealed: e.Bool("WEBHOOK_ALLOW_UNSEALED", false),
	}
}

// Parse checks the keys and returns the SecretKey; its errors name the
// variable at fault.
func (c SecretKeys) Parse() (SecretKey, error) {
	k := SecretKey{unsealed: c.AllowUnsealed}
	var err error
	if k.aead, err = parseAEAD(c.Key); err != nil {
		return SecretKey{}, fmt.Errorf("WEBHOOK_SECRET_KEY: %v", err)
	}
	if k.old, err = parseAEAD(c.Old); err != nil {
		return SecretKey{}, fmt.Errorf("WEBHOOK_SECRET_KEY_OLD: %v", err)
	}
	if k.old != nil && k.aead == nil {
		return SecretKey{}, errors.New("WEBHOOK_SECRET_KEY_OLD is set without WEBHOOK_SECRET_KEY: the previous key only opens, the current one seals")
	}
	return k, nil
}

// ParseSecretKey reads WEBHOOK_SECRET_KEY alone: the standard base64 of 32
// bytes. An empty string is the zero SecretKey.
func ParseSecretKey(s string) (SecretKey, error) {
	aead, err := parseAEAD(s)
	return SecretKey{aead: aead}, err
}

func parseAEAD(s string) (cipher.AEAD, error) {
	if s == "" {
		return nil, nil
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != 32 {
		return nil, errors.New("want the base64 of 32 random bytes (openssl rand -base64 32)")
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Set says whether the key seals.
func (k SecretKey) Set() bool { return k.aead != nil }

// AllowingUnsealed returns k with the development allowance: without a key,
// secrets are stored raw, and raw secrets open.
func (k SecretKey) AllowingUnsealed() SecretKey {
	k.unsealed = true
	return k
}

// CanStore returns an error wrapping ErrUnsealed when a new secret would be
// stored raw: no key, and no development allowance.
func (k SecretKey) CanStore() error {
	if k.aead == nil && !k.unsealed {
		return fmt.Errorf("WEBHOOK_SECRET_KEY is not set: %w", ErrUnsealed)
	}
	return nil
}

// Seal returns what to store for callerID's secret and whether it is sealed:
// sealed with the key, or raw with the development allowance and no key.
func (k SecretKey) Seal(callerID string, secret []byte) ([]byte, bool, error) {
	if k.aead == nil {
		if err := k.CanStore(); err != nil {
			return nil, false, err
		}
		return secret, false, nil
	}
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(secret)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, false, err
	}
	return k.aead.Seal(nonce, nonce, secret, []byte(callerID)), true, nil
}

// Open returns the secret of what is stored for callerID: a sealed one
// opened with the key or the previous key, a raw one as it is with the
// development allowance only.
func (k SecretKey) Open(callerID string, stored []byte, sealed bool) ([]byte, error) {
	if !sealed {
		if !k.unsealed {
			return nil, fmt.Errorf("the secret is stored raw (run api webhook reseal): %w", ErrUnsealed)
		}
		return stored, nil
	}
	if k.aead == nil {
		return nil, errors.New("the secret is sealed and WEBHOOK_SECRET_KEY is not set")
	}
	secret, err := open(k.aead, callerID, stored)
	if err != nil && k.old != nil {
		if s, oerr := open(k.old, callerID, stored); oerr == nil {
			return s, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the sealed secret does not open with WEBHOOK_SECRET_KEY (nor WEBHOOK_SECRET_KEY_OLD): %w", err)
	}
	return secret, nil
}

func open(aead cipher.AEAD, callerID string, stored []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(stored) < n {
		return nil, errors.New("the sealed secret is too short")
	}
	return aead.Open(nil, stored[:n], stored[n:], []byte(callerID))
}

// Reseal returns what to store for callerID's stored secret so that it is
// sealed with the current key, and whether that differs from what is
// stored: a secret already sealed with the current key is left (changed is
// false); one sealed with the previous key, or raw, is sealed anew. A
// secret that opens with neither key is an error.
func (k SecretKey) Reseal(callerID string, stored []byte, sealed bool) (out []byte, changed bool, err error) {
	if k.aead == nil {
		return nil, false, errors.New("WEBHOOK_SECRET_KEY is not set: nothing to seal with")
	}
	secret := stored
	if sealed {
		if _, err := open(k.aead, callerID, stored); err == nil {
			return stored, false, nil
		}
		if k.old == nil {
			return nil, false, errors.New("the sealed secret does not open with WEBHOOK_SECRET_KEY, and WEBHOOK_SECRET_KEY_OLD is not set")
		}
		if secret, err = open(k.old, callerID, stored); err != nil {
			return nil, false, errors.New("the sealed secret opens with neither WEBHOOK_SECRET_KEY nor WEBHOOK_SECRET_KEY_OLD")
		}
	}
	out, _, err = k.Seal(callerID, secret)
	return out, err == nil, err
}
