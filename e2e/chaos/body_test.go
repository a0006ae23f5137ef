package chaos

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"unicode/utf8"
)

// parcel holds the values of one intent's request body. Every rendering of it
// ([parcel.render]) is the same request to the API: only member order,
// whitespace, string escaping and explicit defaults differ.
type parcel struct {
	OrderID    int64
	ParcelNo   int
	WeightG    int
	Service    string
	Name       string
	Line1      string
	Line2      string
	City       string
	PostalCode string
	Country    string
}

// Addresses with non-ASCII names, so that escaping them differently is tried too.
var cities = []struct{ city, postal, country string }{
	{"Exampleton", "10115", "DE"},
	{"München", "80331", "DE"},
	{"Łódź", "90-001", "PL"},
	{"São Paulo", "01000-000", "BR"},
	{"Saint-Étienne", "42000", "FR"},
	{"Springfield", "62701", "US"},
	{"東京", "100-0001", "JP"},
}

var services = []string{"ground", "express", "overnight"}

// newParcel draws an intent's values for order and parcel number.
func newParcel(rng *rand.Rand, order int64, parcelNo int) parcel {
	c := cities[rng.IntN(len(cities))]
	p := parcel{
		OrderID:    order,
		ParcelNo:   parcelNo,
		WeightG:    1 + rng.IntN(30000),
		Service:    services[rng.IntN(len(services))],
		Name:       fmt.Sprintf("Customer %d", order),
		Line1:      fmt.Sprintf("%d Chaos Street", 1+rng.IntN(999)),
		City:       c.city,
		PostalCode: c.postal,
		Country:    c.country,
	}
	if rng.IntN(3) == 0 {
		p.Line2 = fmt.Sprintf("Flat %d", 1+rng.IntN(40))
	}
	return p
}

// member is one object member, its value already rendered.
type member struct {
	name  string
	value []byte
}

// render writes the body. Variant 0 is the plain form (api.md's member order,
// no whitespace, defaults omitted); any other variant shuffles the members of
// both objects, puts random whitespace between tokens, may escape non-ASCII
// characters as \uXXXX and may spell out the defaults (label_version 1, line2
// ""). rng is only used for variants other than 0.
func (p parcel) render(variant int, rng *rand.Rand) []byte {
	plain := variant == 0
	escape := !plain && rng.IntN(2) == 0
	explicit := !plain && rng.IntN(2) == 0
	ws := func() string {
		if plain {
			return ""
		}
		return []string{"", "", " ", "\n", "\t", "  ", "\r\n", "\n  "}[rng.IntN(8)]
	}
	str := func(s string) []byte { return jsonString(s, escape) }

	shipTo := []member{
		{"name", str(p.Name)},
		{"line1", str(p.Line1)},
	}
	if p.Line2 != "" || explicit {
		shipTo = append(shipTo, member{"line2", str(p.Line2)})
	}
	shipTo = append(shipTo,
		member{"city", str(p.City)},
		member{"postal_code", str(p.PostalCode)},
		member{"country", str(p.Country)},
	)
	top := []member{
		{"order_id", strconv.AppendInt(nil, p.OrderID, 10)},
		{"parcel_no", strconv.AppendInt(nil, int64(p.ParcelNo), 10)},
		{"weight_g", strconv.AppendInt(nil, int64(p.WeightG), 10)},
		{"service", str(p.Service)},
	}
	if explicit {
		top = append(top, member{"label_version", []byte("1")})
	}
	if !plain {
		rng.Shuffle(len(shipTo), func(i, j int) { shipTo[i], shipTo[j] = shipTo[j], shipTo[i] })
	}
	top = append(top, member{"ship_to", object(shipTo, ws)})
	if !plain {
		rng.Shuffle(len(top), func(i, j int) { top[i], top[j] = top[j], top[i] })
	}
	return append([]byte(ws()), append(object(top, ws), ws()...)...)
}

func object(members []member, ws func() string) []byte {
	var b bytes.Buffer
	b.WriteString("{" + ws())
	for i, m := range members {
		if i > 0 {
			b.WriteString("," + ws())
		}
		b.Write(jsonString(m.name, false))
		b.WriteString(ws() + ":" + ws())
		b.Write(m.value)
		b.WriteString(ws())
	}
	b.WriteString("}")
	return b.Bytes()
}

// jsonString quotes s as a JSON string; with escapeAll every character outside
// printable ASCII is written as \uXXXX (a surrogate pair above U+FFFF).
func jsonString(s string, escapeAll bool) []byte {
	b := []byte{'"'}
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20 || (escapeAll && r > 0x7e):
			if r > 0xffff {
				r -= 0x10000
				b = fmt.Appendf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				b = fmt.Appendf(b, `\u%04x`, r)
			}
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}
