package idempotency_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/idempotency"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	ok := map[string]string{
		"label:918273:1:v1":       "label:918273:1:v1",
		`"label:918273:1:v1"`:     "label:918273:1:v1",
		"  padded\t":              "padded",
		`"esc\"aped\\"`:           `esc"aped\`,
		strings.Repeat("k", 255):  strings.Repeat("k", 255),
		`a"b`:                     `a"b`,
		"~!@#$%^&*()_+{}|:<>?[];": "~!@#$%^&*()_+{}|:<>?[];",
	}
	for in, want := range ok {
		got, err := idempotency.ParseKey([]string{in})
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	bad := []string{"", "   ", `""`, `"`, `"open`, `"a"b"`, `"bad\escape"`, "with space", "tab\tinside", "ключ", "crlf\r\nX-Evil: 1",
		"nul\x00", strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`, `"quoted space"`}
	for _, in := range bad {
		_, err := idempotency.ParseKey([]string{in})
		require.ErrorIs(t, err, idempotency.ErrKeyInvalid, "%q", in)
	}
	_, err := idempotency.ParseKey(nil)
	require.ErrorIs(t, err, idempotency.ErrKeyMissing)
	_, err = idempotency.ParseKey([]string{"a", "a"})
	require.ErrorIs(t, err, idempotency.ErrKeyInvalid)
}

// FuzzParseKey: nothing panics, and every accepted key is 1–255 visible ASCII
// characters that parse to themselves, bare and quoted.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"label:918273:1:v1", `"label:918273:1:v1"`, `"a\"b"`, "", "ключ", "a b", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := idempotency.ParseKey([]string{in})
		if err != nil {
			return
		}
		require.True(t, len(key) >= 1 && len(key) <= 255)
		for i := 0; i < len(key); i++ {
			require.True(t, key[i] >= 0x21 && key[i] <= 0x7e)
		}
		if key[0] != '"' {
			again, err := idempotency.ParseKey([]string{key})
			require.NoError(t, err)
			require.Equal(t, key, again)
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, err := idempotency.ParseKey([]string{quoted})
		require.NoError(t, err)
		require.Equal(t, key, again)
	})
}
