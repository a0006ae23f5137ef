package idempotency_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/idempotency"
)

func canonicalOf(t *testing.T, raw string) []byte {
	t.Helper()
	c, err := idempotency.Canonical(json.RawMessage(raw))
	require.NoError(t, err)
	return c
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	require.Equal(t, `{"a":1,"b":{"c":"x","d":[1,2]}}`, string(canonicalOf(t, ` { "b" : { "d":[1, 2], "c":"x" }, "a":1 } `)))
	require.Equal(t, `{"n":9223372036854775807}`, string(canonicalOf(t, `{"n":9223372036854775807}`)))
	require.Equal(t, `{"f":1.5,"i":100}`, string(canonicalOf(t, `{"i":1e2,"f":1.50}`)))
	require.Equal(t, `"<&>\u0001é\""`, string(canonicalOf(t, `"\u003c&>\u0001\u00e9\""`)))
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a := idempotency.Fingerprint("POST", "/v1/labels", canonicalOf(t, `{"a":1,"b":2}`))
	b := idempotency.Fingerprint("POST", "/v1/labels", canonicalOf(t, "{\n\"b\": 2,\n\"a\": 1\n}"))
	require.Equal(t, a, b)
	require.Len(t, a, 32)
	require.NotEqual(t, a, idempotency.Fingerprint("POST", "/v1/labels", canonicalOf(t, `{"a":1,"b":3}`)))
	require.NotEqual(t, a, idempotency.Fingerprint("PUT", "/v1/labels", canonicalOf(t, `{"a":1,"b":2}`)))
	require.NotEqual(t, a, idempotency.Fingerprint("POST", "/v1/other", canonicalOf(t, `{"a":1,"b":2}`)))
}

// FuzzCanonical: for any JSON document, the canonical form is a fixed point,
// is valid JSON equal in value to the input, and does not depend on member
// order or whitespace.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"order_id":918273,"parcel_no":1}`, `[1,"a",null,true,{"x":{}}]`, `"\u00e9"`, `1e400`, `{"a":1,"a":2}`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var v any
		dec := json.NewDecoder(bytes.NewReader([]byte(in)))
		dec.UseNumber()
		if dec.Decode(&v) != nil || dec.More() {
			return
		}
		c1, err := idempotency.Canonical(json.RawMessage(in))
		if err != nil {
			return // e.g. numbers out of float64 range are refused, not mangled
		}
		c2, err := idempotency.Canonical(json.RawMessage(c1))
		require.NoError(t, err)
		require.Equal(t, string(c1), string(c2), "canonical form is a fixed point")
		require.True(t, json.Valid(c1))
		// Re-encoding the decoded value (map order, Go's own spacing) gives the same canonical form.
		re, err := json.MarshalIndent(v, " ", "\t")
		require.NoError(t, err)
		c3, err := idempotency.Canonical(json.RawMessage(re))
		require.NoError(t, err)
		require.Equal(t, string(c1), string(c3))
	})
}
