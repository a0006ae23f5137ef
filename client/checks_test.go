package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// require is the handful of checks this package's tests make, written on the
// standard library: the client's module requires no other module, not even
// for its tests, so that none lands in a caller's go.sum. Each failure stops
// the test, with the message and arguments after the values, if any.
var require checks

type checks struct{}

func fail(t testing.TB, what string, msgAndArgs []any) {
	t.Helper()
	if f, ok := firstString(msgAndArgs); ok {
		what += ": " + fmt.Sprintf(f, msgAndArgs[1:]...)
	} else if len(msgAndArgs) > 0 {
		what += ": " + fmt.Sprint(msgAndArgs...)
	}
	t.Fatal(what)
}

func firstString(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	f, ok := args[0].(string)
	return f, ok
}

func (checks) Equal(t testing.TB, want, got any, msgAndArgs ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		fail(t, fmt.Sprintf("not equal:\nwant %#v\n got %#v", want, got), msgAndArgs)
	}
}

// EqualValues compares got converted to want's type, e.g. a JSON number with an int.
func (c checks) EqualValues(t testing.TB, want, got any, msgAndArgs ...any) {
	t.Helper()
	w, g := reflect.ValueOf(want), reflect.ValueOf(got)
	if !g.IsValid() || !w.IsValid() || !g.Type().ConvertibleTo(w.Type()) {
		fail(t, fmt.Sprintf("not equal values: want %#v, got %#v", want, got), msgAndArgs)
	}
	c.Equal(t, want, g.Convert(w.Type()).Interface(), msgAndArgs...)
}

func (checks) True(t testing.TB, v bool, msgAndArgs ...any) {
	t.Helper()
	if !v {
		fail(t, "false, want true", msgAndArgs)
	}
}

func (checks) False(t testing.TB, v bool, msgAndArgs ...any) {
	t.Helper()
	if v {
		fail(t, "true, want false", msgAndArgs)
	}
}

func (checks) NoError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		fail(t, fmt.Sprintf("unexpected error: %v", err), msgAndArgs)
	}
}

func (checks) ErrorIs(t testing.TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		fail(t, fmt.Sprintf("error %v is not %v", err, target), msgAndArgs)
	}
}

func (checks) ErrorAs(t testing.TB, err error, target any, msgAndArgs ...any) {
	t.Helper()
	if !errors.As(err, target) {
		fail(t, fmt.Sprintf("error %v is not a %T", err, target), msgAndArgs)
	}
}

func (checks) ErrorContains(t testing.TB, err error, s string, msgAndArgs ...any) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), s) {
		fail(t, fmt.Sprintf("error %v does not contain %q", err, s), msgAndArgs)
	}
}

func (checks) Nil(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if rv := reflect.ValueOf(v); v != nil && !(rv.Kind() == reflect.Pointer && rv.IsNil()) {
		fail(t, fmt.Sprintf("%#v, want nil", v), msgAndArgs)
	}
}

// Len checks the length of a slice, map or string.
func (checks) Len(t testing.TB, v any, n int, msgAndArgs ...any) {
	t.Helper()
	if l := reflect.ValueOf(v).Len(); l != n {
		fail(t, fmt.Sprintf("length %d, want %d: %#v", l, n, v), msgAndArgs)
	}
}

func (c checks) Empty(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	c.Len(t, v, 0, msgAndArgs...)
}

func (checks) NotEmpty(t testing.TB, s string, msgAndArgs ...any) {
	t.Helper()
	if s == "" {
		fail(t, "empty string", msgAndArgs)
	}
}

func (checks) Zero(t testing.TB, d time.Duration, msgAndArgs ...any) {
	t.Helper()
	if d != 0 {
		fail(t, fmt.Sprintf("%v, want zero", d), msgAndArgs)
	}
}

// Between checks lo <= d <= hi.
func (checks) Between(t testing.TB, d, lo, hi time.Duration, msgAndArgs ...any) {
	t.Helper()
	if d < lo || d > hi {
		fail(t, fmt.Sprintf("%v, want from %v to %v", d, lo, hi), msgAndArgs)
	}
}

// JSONEq compares two JSON texts as values.
func (checks) JSONEq(t testing.TB, want, got string, msgAndArgs ...any) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		fail(t, fmt.Sprintf("want is not JSON: %v", err), msgAndArgs)
	}
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		fail(t, fmt.Sprintf("got is not JSON: %v: %s", err, got), msgAndArgs)
	}
	if !reflect.DeepEqual(w, g) {
		fail(t, fmt.Sprintf("JSON not equal:\nwant %s\n got %s", want, got), msgAndArgs)
	}
}
