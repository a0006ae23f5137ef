package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/idempotency"
)

// FuzzParseParcel: the request validator never panics and explains every
// refusal; for a body it accepts, the fingerprint the API computes does not
// change with member order, whitespace, string escaping or spelled-out
// defaults, and does change when any one value changes. pick chooses the
// renderings and the value changed. Committed corpus:
// testdata/fuzz/FuzzParseParcel.
func FuzzParseParcel(f *testing.F) {
	for _, s := range []string{
		`{"order_id":918273,"parcel_no":1,"weight_g":1450,"service":"ground","ship_to":{"name":"A. Example","line1":"1 Example Street","city":"Exampleton","postal_code":"10115","country":"DE"}}`,
		`{"ship_to":{"country":"PL","postal_code":"90-001","city":"\u0141\u00f3d\u017a","line2":"","line1":"ul. Piotrkowska 1","name":"B"},"label_version":1,"service":"express","weight_g":70000,"parcel_no":999,"order_id":9223372036854775807}`,
		`{"order_id":1,"parcel_no":1,"weight_g":1,"service":"overnight","ship_to":{"name":"<&>","line1":"x","city":"y","postal_code":"z","country":"JP"}}`,
		`{"order_id":1.0,"parcel_no":1,"weight_g":1,"service":"ground","ship_to":{}}`,
		`{"order_id":1,"order_id":2}`,
		`[[[[[[[[[[]]]]]]]]]]`,
	} {
		f.Add([]byte(s), uint(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, pick uint) {
		p, errs := parseParcel(body)
		if len(errs) > 0 {
			for _, e := range errs {
				require.NotEmpty(t, e.Message, "every refusal says why: %+v", errs)
			}
			return
		}
		want := fingerprint(t, p)
		tree, err := decodeStrict(body)
		require.NoError(t, err, "an accepted body decodes")
		obj := tree.(map[string]any)

		// Member order and whitespace never change the hash.
		for i := range uint(3) {
			again := render(obj, pick+i)
			got, errs := parseParcel(again)
			require.Empty(t, errs, "%s", again)
			require.Equal(t, p, got, "%s", again)
			require.Equal(t, want, fingerprint(t, got), "%s", again)
		}

		// Nor does spelling out an omitted default, or omitting an explicit one.
		same := clone(obj)
		shipTo := same["ship_to"].(map[string]any)
		switch {
		case same["label_version"] == nil:
			same["label_version"] = json.Number("1")
		case p.LabelVersion == 1:
			delete(same, "label_version")
		}
		switch {
		case shipTo["line2"] == nil:
			shipTo["line2"] = ""
		case p.ShipTo.Line2 == "":
			delete(shipTo, "line2")
		}
		again := render(same, pick)
		got, errs := parseParcel(again)
		require.Empty(t, errs, "%s", again)
		require.Equal(t, want, fingerprint(t, got), "%s", again)

		// Any change of a value does.
		changed, field := mutate(obj, pick)
		again = render(changed, pick)
		got, errs = parseParcel(again)
		require.Empty(t, errs, "changing %s keeps the body valid: %s", field, again)
		require.NotEqual(t, p, got, "changing %s", field)
		require.NotEqual(t, want, fingerprint(t, got), "changing %s changes the fingerprint: %s", field, again)
	})
}

// fingerprint is the request hash the API stores for a validated parcel.
func fingerprint(t *testing.T, p labels.Parcel) []byte {
	t.Helper()
	c, err := idempotency.Canonical(p)
	require.NoError(t, err)
	return idempotency.Fingerprint(http.MethodPost, "/v1/labels", c)
}

// whitespace a rendering puts between tokens, chosen by position and pick.
var whitespace = []string{"", " ", "\n", "\t", "\r\n", "  ", "\n\t\t", ""}

// render writes a decoded body again with another member order (a rotation of
// the sorted names, reversed or not), other whitespace and other string
// escaping, all chosen by pick.
func render(v any, pick uint) []byte {
	var b bytes.Buffer
	n := pick
	ws := func() {
		n = n*2862933555777941757 + 3037000493
		b.WriteString(whitespace[(n>>33)%uint(len(whitespace))])
	}
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			names := make([]string, 0, len(v))
			for k := range v {
				names = append(names, k)
			}
			slices.Sort(names)
			if pick&1 == 1 {
				slices.Reverse(names)
			}
			if len(names) > 0 {
				r := int(pick/2) % len(names)
				names = append(names[r:], names[:r]...)
			}
			b.WriteByte('{')
			for i, k := range names {
				if i > 0 {
					b.WriteByte(',')
				}
				ws()
				writeString(&b, k, pick)
				ws()
				b.WriteByte(':')
				ws()
				write(v[k])
				ws()
			}
			b.WriteByte('}')
		case []any:
			b.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					b.WriteByte(',')
				}
				ws()
				write(e)
				ws()
			}
			b.WriteByte(']')
		case string:
			writeString(&b, v, pick)
		case json.Number:
			b.WriteString(v.String())
		default: // bool, nil
			j, _ := json.Marshal(v)
			b.Write(j)
		}
	}
	ws()
	write(v)
	ws()
	return b.Bytes()
}

// writeString escapes s one of two ways: encoding/json's (with <, > and &
// escaped) or the minimal one.
func writeString(b *bytes.Buffer, s string, pick uint) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(pick&2 == 0)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}

func clone(v any) map[string]any {
	var cp func(v any) any
	cp = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			m := make(map[string]any, len(v))
			for k, e := range v {
				m[k] = cp(e)
			}
			return m
		case []any:
			return slices.Clone(v)
		}
		return v
	}
	return cp(v).(map[string]any)
}

// mutate changes one value of a valid body, chosen by pick, so that the
// body stays valid, and names the field it changed.
func mutate(obj map[string]any, pick uint) (map[string]any, string) {
	changed := clone(obj)
	shipTo := changed["ship_to"].(map[string]any)
	fields := []string{"order_id", "parcel_no", "weight_g", "label_version", "service",
		"ship_to.name", "ship_to.line1", "ship_to.line2", "ship_to.city", "ship_to.postal_code", "ship_to.country"}
	field := fields[pick%uint(len(fields))]
	integer := func(name string, def, hi int64) {
		n := def
		if raw, ok := changed[name]; ok {
			n, _ = strconv.ParseInt(string(raw.(json.Number)), 10, 64)
		}
		if n < hi {
			n++
		} else {
			n--
		}
		changed[name] = json.Number(strconv.FormatInt(n, 10))
	}
	text := func(name string) {
		s, _ := shipTo[name].(string)
		if len(s) < maxStringBytes {
			shipTo[name] = s + "x"
		} else {
			shipTo[name] = "changed"
		}
	}
	switch field {
	case "order_id":
		integer("order_id", 0, 1<<63-1)
	case "parcel_no":
		integer("parcel_no", 0, 999)
	case "weight_g":
		integer("weight_g", 0, 70000)
	case "label_version":
		integer("label_version", 1, 99)
	case "service":
		i := slices.Index(labels.Services, changed["service"].(string))
		changed["service"] = labels.Services[(i+1)%len(labels.Services)]
	case "ship_to.country":
		if shipTo["country"] == "DE" {
			shipTo["country"] = "FR"
		} else {
			shipTo["country"] = "DE"
		}
	default:
		text(field[len("ship_to."):])
	}
	return changed, field
}

// decodeFast either passes a body on or makes of it exactly the tree that
// decodeTokens makes; it never accepts what decodeTokens refuses.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range []string{
		`{"order_id":918273,"parcel_no":1,"weight_g":1450,"service":"ground","ship_to":{"name":"A. Example","line1":"1 Example Street","city":"Exampleton","postal_code":"10115","country":"DE"}}`,
		` { "a" : [ 1 , -0.5e+3 , true , false , null , "x" , { } , [ ] ] } `,
		`{"a":"\u00e9"}`, `{"a":"é"}`, `{"a":1,"a":2}`, `[[[[[[[[[[]]]]]]]]]]`, `[[[[[[[[1]]]]]]]]`,
		`01`, `-`, `1.`, `1e`, `.5`, `1E400`, `-0`, `"a`, `{"a"}`, `{"a":}`, `[1,]`, `{,}`, `truex`, `nul`, "\"\t\"", ``, ` `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // decodeStrict refuses it before either runs
		}
		fast, ok := decodeFast(body)
		if !ok {
			return
		}
		slow, err := decodeTokens(body)
		if err != nil {
			t.Fatalf("decodeFast accepted %q, which decodeTokens refuses: %v", body, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: decodeFast made %#v, decodeTokens %#v", body, fast, slow)
		}
	})
}
