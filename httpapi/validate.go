package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/labelkit/labels"
)

// maxDepth bounds the nesting of a request body. The parcel needs 2; anything
// deeper is refused while reading, before it can cost memory.
const maxDepth = 8

var (
	errTooDeep   = errors.New("nested too deeply")
	errDuplicate = errors.New("duplicate member")
)

// decodeStrict reads exactly one JSON value into a tree of map[string]any,
// []any, json.Number, string, bool and nil. Unlike encoding/json it refuses
// duplicate member names (the fingerprint would depend on which one wins) and
// nesting deeper than maxDepth, and it requires valid UTF-8.
func decodeStrict(body []byte) (any, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("the body is not valid UTF-8")
	}
	if v, ok := decodeFast(body); ok {
		return v, nil
	}
	return decodeTokens(body)
}

// decodeTokens is decodeStrict walking encoding/json's tokens: every body
// decodeFast passes on comes here, which says exactly what is wrong with it.
func decodeTokens(body []byte) (any, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("the body is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, malformed(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth+1 > maxDepth {
			return nil, errTooDeep
		}
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, malformed(err)
				}
				k := kt.(string)
				if _, dup := obj[k]; dup {
					return nil, fmt.Errorf("%w %q", errDuplicate, k)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, malformed(err)
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, malformed(err)
			}
			return arr, nil
		}
		return nil, errors.New("malformed JSON")
	default:
		return t, nil
	}
}

// malformed names what is wrong with JSON that does not parse. A body that
// ends inside a value (`{"order_id":`) is truncated, which is worth saying
// plainly: it is what a client that lost part of its body sends.
func malformed(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("malformed JSON: the body ends before the JSON value is complete (truncated)")
	}
	return fmt.Errorf("malformed JSON: %w", err)
}

var countryRE = regexp.MustCompile(`^[A-Z]{2}$`)

// parseParcel validates a POST /v1/labels body and applies its defaults. It
// returns every problem it finds, field by field.
func parseParcel(body []byte) (labels.Parcel, []labels.FieldError) {
	var p labels.Parcel
	tree, err := decodeStrict(body)
	if err != nil {
		return p, []labels.FieldError{{Field: "", Message: err.Error()}}
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return p, []labels.FieldError{{Field: "", Message: "the body must be a JSON object"}}
	}
	v := validator{}
	v.unknown("", obj, "order_id", "parcel_no", "weight_g", "service", "label_version", "ship_to")
	p.OrderID = v.integer(obj, "", "order_id", 1, 1<<63-1, true, 0)
	p.ParcelNo = int(v.integer(obj, "", "parcel_no", 1, 999, true, 0))
	p.WeightG = int(v.integer(obj, "", "weight_g", 1, 70000, true, 0))
	p.LabelVersion = int(v.integer(obj, "", "label_version", 1, 99, false, 1))
	p.Service = v.str(obj, "", "service", true)
	if p.Service != "" && !slices.Contains(labels.Services, p.Service) {
		v.add("service", "must be one of ground, express, overnight")
	}
	if raw, present := obj["ship_to"]; !present {
		v.add("ship_to", "is required")
	} else if st, ok := raw.(map[string]any); !ok {
		v.add("ship_to", "must be an object")
	} else {
		v.unknown("ship_to.", st, "name", "line1", "line2", "city", "postal_code", "country")
		p.ShipTo.Name = v.str(st, "ship_to.", "name", true)
		p.ShipTo.Line1 = v.str(st, "ship_to.", "line1", true)
		p.ShipTo.Line2 = v.str(st, "ship_to.", "line2", false)
		p.ShipTo.City = v.str(st, "ship_to.", "city", true)
		p.ShipTo.PostalCode = v.str(st, "ship_to.", "postal_code", true)
		p.ShipTo.Country = v.str(st, "ship_to.", "country", true)
		if c := p.ShipTo.Country; c != "" && (!countryRE.MatchString(c) || !isoCountries[c]) {
			v.add("ship_to.country", "must be an ISO 3166-1 alpha-2 code in upper case")
		}
	}
	return p, v.errs
}

type validator struct{ errs []labels.FieldError }

func (v *validator) add(field, msg string) {
	v.errs = append(v.errs, labels.FieldError{Field: field, Message: msg})
}

func (v *validator) unknown(prefix string, obj map[string]any, known ...string) {
	var extra []string
	for k := range obj {
		if !slices.Contains(known, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	for _, k := range extra {
		v.add(prefix+k, "is not a known field")
	}
}

func (v *validator) integer(obj map[string]any, prefix, name string, lo, hi int64, required bool, def int64) int64 {
	raw, present := obj[name]
	if !present {
		if required {
			v.add(prefix+name, "is required")
		}
		return def
	}
	num, ok := raw.(json.Number)
	if !ok {
		v.add(prefix+name, "must be an integer")
		return 0
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) || isIntegerLiteral(string(num)) {
			v.add(prefix+name, fmt.Sprintf("must be between %d and %d", lo, hi))
		} else {
			v.add(prefix+name, "must be an integer")
		}
		return 0
	}
	if n < lo || n > hi {
		v.add(prefix+name, fmt.Sprintf("must be between %d and %d", lo, hi))
		return 0
	}
	return n
}

func isIntegerLiteral(s string) bool {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// maxStringBytes bounds every address field.
const maxStringBytes = 200

func (v *validator) str(obj map[string]any, prefix, name string, required bool) string {
	raw, present := obj[name]
	if !present {
		if required {
			v.add(prefix+name, "is required")
		}
		return ""
	}
	s, ok := raw.(string)
	if !ok {
		v.add(prefix+name, "must be a string")
		return ""
	}
	switch {
	case required && s == "":
		v.add(prefix+name, "must not be empty")
	case len(s) > maxStringBytes:
		v.add(prefix+name, fmt.Sprintf("must be at most %d bytes", maxStringBytes))
	case hasControl(s):
		v.add(prefix+name, "must not contain control characters")
	default:
		return s
	}
	return ""
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return false
}

// isoCountries lists the officially assigned ISO 3166-1 alpha-2 codes.
var isoCountries = func() map[string]bool {
	const codes = "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ " +
		"CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR " +
		"GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP " +
		"KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT " +
		"MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW " +
		"SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG " +
		"UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW"
	m := map[string]bool{}
	for i := 0; i+2 <= len(codes); i += 3 {
		m[codes[i:i+2]] = true
	}
	return m
}()

// decodeFast decodes the bodies clients send, in one pass over the bytes, to
// the tree decodeTokens makes of them; it says false for anything else
// (a backslash in a string, any error, a duplicate member, too deep), and
// decodeStrict then asks decodeTokens, so that what is refused, and why, is
// decided in one place. encoding/json's token walk was a tenth of the API's
// CPU per create; FuzzDecodeFast holds the two
// to the same trees. body is valid UTF-8.
func decodeFast(body []byte) (any, bool) {
	p := fastParser{b: body}
	v, ok := p.value(0)
	if !ok {
		return nil, false
	}
	p.space()
	return v, p.i == len(p.b)
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value reads one value at nesting depth (the enclosing containers).
func (p *fastParser) value(depth int) (any, bool) {
	p.space()
	if p.i >= len(p.b) {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		if depth+1 > maxDepth {
			return nil, false
		}
		p.i++
		obj := map[string]any{}
		p.space()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return obj, true
		}
		for {
			p.space()
			k, ok := p.str()
			if !ok {
				return nil, false
			}
			if _, dup := obj[k]; dup {
				return nil, false
			}
			p.space()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, false
			}
			p.i++
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			obj[k] = v
			if more, ok := p.next('}'); !ok || !more {
				return obj, ok
			}
		}
	case c == '[':
		if depth+1 > maxDepth {
			return nil, false
		}
		p.i++
		arr := []any{}
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return arr, true
		}
		for {
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			arr = append(arr, v)
			if more, ok := p.next(']'); !ok || !more {
				return arr, ok
			}
		}
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		for _, lit := range [...]struct {
			text string
			v    any
		}{{"true", true}, {"false", false}, {"null", nil}} {
			if bytes.HasPrefix(p.b[p.i:], []byte(lit.text)) {
				p.i += len(lit.text)
				return lit.v, true
			}
		}
		return nil, false
	}
}

// next reads what follows a member or an element: a comma (more), or the
// container's closing byte.
func (p *fastParser) next(closing byte) (more, ok bool) {
	p.space()
	if p.i >= len(p.b) {
		return false, false
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		return true, true
	case closing:
		p.i++
		return false, true
	}
	return false, false
}

// str reads a string without escapes or control characters.
func (p *fastParser) str() (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return string(p.b[start:j]), true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// number reads a number as JSON writes it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastParser) number() (json.Number, bool) {
	start, j := p.i, p.i
	digits := func() bool {
		k := j
		for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
			j++
		}
		return j > k
	}
	if p.b[j] == '-' {
		j++
	}
	switch {
	case j < len(p.b) && p.b[j] == '0':
		j++
	case !digits():
		return "", false
	}
	if j < len(p.b) && p.b[j] == '.' {
		j++
		if !digits() {
			return "", false
		}
	}
	if j < len(p.b) && (p.b[j] == 'e' || p.b[j] == 'E') {
		j++
		if j < len(p.b) && (p.b[j] == '+' || p.b[j] == '-') {
			j++
		}
		if !digits() {
			return "", false
		}
	}
	p.i = j
	return json.Number(p.b[start:j]), true
}
