package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"unicode/utf8"
)

// FingerprintVersion is the version of [Fingerprint] stored with every record,
// so that the algorithm can change later without breaking old keys.
const FingerprintVersion = 1

// Fingerprint returns SHA-256 over the method and the route path, each
// followed by a newline (neither can contain one, so no two different
// triples hash the same input), and then the canonical body.
func Fingerprint(method, path string, canonicalBody []byte) []byte {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{'\n'})
	h.Write([]byte(path))
	h.Write([]byte{'\n'})
	h.Write(canonicalBody)
	return h.Sum(nil)
}

// Appender is a value that writes its own canonical form: the bytes
// Canonical would produce for it through encoding/json, appended to b. ok is
// false when it cannot (Canonical then takes the general way).
type Appender interface {
	AppendCanonical(b []byte) (out []byte, ok bool)
}

// Canonical returns the canonical JSON form of v, in the spirit of RFC 8785:
// object members sorted by name, no insignificant whitespace, numbers in their
// shortest form, strings escaped minimally. v is any value encoding/json can
// marshal; json.RawMessage input is canonicalised too. An [Appender] writes
// its form itself, without the round trip through encoding/json.
func Canonical(v any) ([]byte, error) {
	if a, ok := v.(Appender); ok {
		if b, ok := a.AppendCanonical(make([]byte, 0, 256)); ok {
			return b, nil
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, tree); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case json.Number:
		s, err := canonicalNumber(string(v))
		if err != nil {
			return err
		}
		buf.WriteString(s)
	case string:
		writeString(buf, v)
	case []any:
		buf.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys) // byte order; RFC 8785 sorts by UTF-16 units, equal for our ASCII names
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, v[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("canonical: unexpected %T", v)
	}
	return nil
}

// canonicalNumber writes integers exactly (any size) and other numbers in the
// shortest form that round-trips a float64.
func canonicalNumber(s string) (string, error) {
	// The common case, an integer that fits in 64 bits, without math/big
	// (which showed in the API's profile); the same answer as below.
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(i, 10), nil
	}
	if i, ok := new(big.Int).SetString(s, 10); ok {
		return i.String(), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return "", fmt.Errorf("canonical: number %q: %w", s, err)
	}
	if f == float64(int64(f)) && f >= -1e15 && f <= 1e15 {
		return strconv.FormatInt(int64(f), 10), nil
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}

// writeString escapes only what JSON requires: the quote, the backslash and
// control characters (RFC 8785 §3.2.2.2); everything else is written as UTF-8.
func writeString(buf *bytes.Buffer, s string) {
	buf.Write(appendString(buf.AvailableBuffer(), s))
}

// AppendString appends s as a canonical JSON string, as [Canonical] writes
// it. ok is false when s is not valid UTF-8: encoding/json would replace the
// invalid bytes, so only the general way writes what Canonical does.
func AppendString(b []byte, s string) (out []byte, ok bool) {
	if !utf8.ValidString(s) {
		return b, false
	}
	return appendString(b, s), true
}

func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b = append(b, `\"`...)
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\b':
			b = append(b, `\b`...)
		case c == '\f':
			b = append(b, `\f`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c == '\t':
			b = append(b, `\t`...)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
