package idempotency

import (
	"errors"
	"strings"
	"time"
)

// MaxKeyLen is the longest key accepted, after unquoting.
const MaxKeyLen = 255

// Errors of [ParseKey].
var (
	ErrKeyMissing = errors.New("Idempotency-Key header is missing")
	ErrKeyInvalid = errors.New("Idempotency-Key header is invalid")
)

// ParseKey returns the key named by the Idempotency-Key field values of one
// request. A value is either bare (label:918273:1:v1) or the Structured-Field
// string form ("label:918273:1:v1", with \" and \\ escapes); both name the same
// key. After unquoting the key is 1 to 255 visible ASCII characters (0x21–0x7E).
// More than one field, an empty or over-long value, or any other character is
// [ErrKeyInvalid]; no field at all is [ErrKeyMissing].
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", ErrKeyInvalid
	}
	v := strings.Trim(values[0], " \t") // optional whitespace around a field value (RFC 9110 §5.5)
	if v == "" {
		return "", ErrKeyInvalid
	}
	if v[0] == '"' {
		var err error
		if v, err = unquote(v); err != nil {
			return "", err
		}
	}
	if len(v) == 0 || len(v) > MaxKeyLen {
		return "", ErrKeyInvalid
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", ErrKeyInvalid
		}
	}
	return v, nil
}

// unquote decodes an RFC 8941 sf-string: a quoted string in which only \" and
// \\ are escapes, and which holds printable ASCII (0x20–0x7E) only.
func unquote(v string) (string, error) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", ErrKeyInvalid
	}
	var b strings.Builder
	inner := v[1 : len(v)-1]
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			i++
			if i == len(inner) || (inner[i] != '"' && inner[i] != '\\') {
				return "", ErrKeyInvalid
			}
			b.WriteByte(inner[i])
		case c == '"':
			return "", ErrKeyInvalid // an unescaped quote ends the string early
		case c < 0x20 || c > 0x7e:
			return "", ErrKeyInvalid
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// DefaultKeyRetention is KEY_RETENTION's default: how long a completed key
// is kept (the API sets a started key's expiry by it, the worker a completed
// one's, and River keeps completed jobs as long).
const DefaultKeyRetention = 24 * time.Hour
