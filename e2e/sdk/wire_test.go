package sdk_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/client"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/webhook"
)

// The client defines the API's wire types itself, so that its module needs
// nothing of the service's. These tests hold them to the service's: the same
// JSON members, of the same JSON shapes, with the same omitempty, and every
// member a fully set service value writes read back unchanged.

// shape describes how encoding/json writes a type: a struct's members by
// name (sorted, with omitempty), what a pointer, slice or map holds, and
// the kind of anything else. Go field names do not matter; JSON names do.
func shape(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(time.Time{}):
		return "time"
	case reflect.TypeOf(json.RawMessage{}):
		return "raw"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return "*" + shape(t.Elem())
	case reflect.Slice:
		return "[]" + shape(t.Elem())
	case reflect.Map:
		return "map[" + shape(t.Key()) + "]" + shape(t.Elem())
	case reflect.Struct:
		var members []string
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if !f.IsExported() || tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if name == "" {
				name = f.Name
			}
			m := name + ":" + shape(f.Type)
			if strings.Contains(","+opts+",", ",omitempty,") {
				m += ",omitempty"
			}
			members = append(members, m)
		}
		sort.Strings(members)
		return "{" + strings.Join(members, " ") + "}"
	}
	return t.Kind().String()
}

func TestWireTypesMatchTheService(t *testing.T) {
	t.Parallel()
	for _, pair := range []struct{ service, client any }{
		{labels.Address{}, client.Address{}},
		{labels.Parcel{}, client.Parcel{}},
		{labels.Label{}, client.Label{}},
		{labels.Document{}, client.Document{}},
		{labels.LabelRequest{}, client.LabelRequest{}},
		{labels.Problem{}, client.Problem{}},
		{labels.FieldError{}, client.FieldError{}},
	} {
		st, ct := reflect.TypeOf(pair.service), reflect.TypeOf(pair.client)
		require.Equal(t, shape(st), shape(ct), "%v and %v", st, ct)
	}
	// A webhook's body: the client reads its data as a label request.
	body, event := shape(reflect.TypeOf(jobs.EventBody{})), shape(reflect.TypeOf(client.Event{}))
	require.Equal(t, body, strings.Replace(event, "data:"+shape(reflect.TypeOf(client.LabelRequest{})), "data:raw", 1))
	require.Equal(t, webhook.TypeSucceeded, client.EventSucceeded)
	require.Equal(t, webhook.TypeFailed, client.EventFailed)
}

// shape fails on a difference: a member renamed, retyped, added or made
// omitempty on one side only.
func TestShapeSeesEveryDifference(t *testing.T) {
	t.Parallel()
	type base struct {
		A string `json:"a"`
		B *int   `json:"b,omitempty"`
	}
	for _, other := range []any{
		struct {
			A string `json:"x"`
			B *int   `json:"b,omitempty"`
		}{},
		struct {
			A int  `json:"a"`
			B *int `json:"b,omitempty"`
		}{},
		struct {
			A string `json:"a"`
			B *int   `json:"b"`
		}{},
		struct {
			A string `json:"a"`
			B *int   `json:"b,omitempty"`
			C string `json:"c"`
		}{},
		struct {
			A string `json:"a"`
		}{},
	} {
		require.NotEqual(t, shape(reflect.TypeOf(base{})), shape(reflect.TypeOf(other)), "%T", other)
	}
	require.Equal(t, shape(reflect.TypeOf(base{})), shape(reflect.TypeOf(struct {
		B *int   `json:"b,omitempty"`
		X string `json:"a"`
	}{})), "the order and Go names of fields do not matter")
}

// Service values with every member set, encoded as the service encodes
// them, decode into the client's types (no member unknown) and encode back
// to the same JSON.
func TestWireRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 12, 2, 10, 0, 1, 123456000, time.UTC)
	label := labels.Label{
		LabelID: "lbl_1", OrderID: 918273, ParcelNo: 2, LabelVersion: 3, Service: "express",
		TrackingNo: "TRK1", CarrierLabelID: "cl_1", CostCents: 1299, Currency: "EUR", CreatedAt: created,
		Document: &labels.Document{URL: "https://carrier.example/v1/labels/cl_1/document", ContentType: "application/pdf", SizeBytes: 4242},
	}
	problem := labels.NewProblem(labels.CodeCarrierRejected, "the carrier refused the parcel")
	problem.Errors = []labels.FieldError{{Field: "ship_to.postal_code", Message: "unknown"}}
	problem.CarrierCode, problem.CarrierMessage = "address_invalid", "no such postal code"
	request := labels.LabelRequest{
		ID: "lr_1", IdempotencyKey: "label:918273:2:v3", Status: labels.StatusSucceeded,
		CreatedAt: created, CompletedAt: &created, Label: label.Body(), Error: problem.Body(),
	}
	parcel := labels.Parcel{OrderID: 918273, ParcelNo: 2, WeightG: 1450, Service: "ground", LabelVersion: 3, ShipTo: labels.Address{
		Name: "A. Example", Line1: "1 Example Street", Line2: "Floor 2", City: "Exampleton", PostalCode: "10115", Country: "DE",
	}}
	for _, tc := range []struct {
		service []byte
		into    any
	}{
		{label.Body(), &client.Label{}},
		{problem.Body(), &client.Problem{}},
		{mustJSON(t, request), &client.LabelRequest{}},
		{mustJSON(t, parcel), &client.Parcel{}},
	} {
		dec := json.NewDecoder(bytes.NewReader(tc.service))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(tc.into), "%s into %T", tc.service, tc.into)
		require.JSONEq(t, string(tc.service), string(mustJSON(t, tc.into)), "%T", tc.into)
	}
	// And the parcel the client sends is the parcel the service reads.
	var back labels.Parcel
	var sent client.Parcel
	require.NoError(t, json.Unmarshal(mustJSON(t, parcel), &sent))
	require.NoError(t, json.Unmarshal(mustJSON(t, sent), &back))
	require.Equal(t, parcel, back)
}

// The problem codes and request statuses the client names are the
// service's, every one of them, with the same values.
func TestWireConstantsMatchTheService(t *testing.T) {
	t.Parallel()
	service := constants(t, "../../labels.go")
	sdk := constants(t, "../../client/types.go")
	require.NotEmpty(t, service)
	require.Equal(t, service, sdk)
}

// constants reads the string constants named Code… or Status… of a file.
func constants(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	require.NoError(t, err)
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Code") && !strings.HasPrefix(n.Name, "Status") {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				require.True(t, ok, "%s: %s is not a literal", file, n.Name)
				v, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out[n.Name] = v
			}
		}
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err, "%T", v)
	return b
}
