package reconcile

import (
	"context"
	"strings"
	"testing"
)

func TestNeutralise(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"lr_0001", "lr_0001"},
		{"INV-20261202", "INV-20261202"},
		// Numbers, negative ones too, stay numbers.
		{"612", "612"},
		{"0", "0"},
		{"-12", "-12"},
		{"-1.5", "-1.5"},
		{"-0", "-0"},
		// Each character a formula begins with.
		{"=1+1", "'=1+1"},
		{`=HYPERLINK("http://x","y")`, `'=HYPERLINK("http://x","y")`},
		{"=cmd|'/c calc'!A1", "'=cmd|'/c calc'!A1"},
		{"+SUM(1+1)", "'+SUM(1+1)"},
		{"+12", "'+12"},
		{"-", "'-"},
		{"-2+3", "'-2+3"},
		{"-1.", "'-1."},
		{"-.5", "'-.5"},
		{"-1.2.3", "'-1.2.3"},
		{"-1e5", "'-1e5"},
		{"- 1", "'- 1"},
		{"-INV-4", "'-INV-4"},
		{"@foo", "'@foo"},
		{"@", "'@"},
		{"\tcarrier:tab", "'\tcarrier:tab"},
		{"\rref-cr", "'\rref-cr"},
		// Only the first character counts.
		{"a=1", "a=1"},
		{" =1", " =1"},
		{"\n=1", "\n=1"},
		// Already quoted: text already, left as it is.
		{"'=1+1", "'=1+1"},
		{"'", "'"},
	} {
		got := neutralise(tc.in)
		if got != tc.want {
			t.Errorf("neutralise(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again := neutralise(got); again != got {
			t.Errorf("neutralise(neutralise(%q)) = %q, want %q: neutralised once is enough", tc.in, again, got)
		}
	}
}

// Counts printed in the text reports agree with their noun.
func TestCountedNouns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 discrepancies"}, {1, "1 discrepancy"}, {2, "2 discrepancies"}, {1200, "1,200 discrepancies"}} {
		if got := countOf(tc.n, "discrepancy", "discrepancies"); got != tc.want {
			t.Errorf("countOf(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	var b strings.Builder
	r := &Report{Counts: map[string]int{Matched: 3, DuplicateCharge: 1}}
	if err := r.WriteText(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\n1 discrepancy: exit status 1\n") {
		t.Errorf("one discrepancy's report:\n%s", b.String())
	}
}

// A void with nothing to void does not claim that every targeted label is
// voided.
func TestVoidTextWithNothingToVoid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		items []VoidItem
		want  string
	}{
		{nil, "\nnothing was to be voided: exit status 0\n"},
		{[]VoidItem{{Refs: Refs{CarrierLabelID: "c1"}, Outcome: VoidKept}}, "\nnothing was to be voided: exit status 0\n"},
		{[]VoidItem{{Refs: Refs{CarrierLabelID: "c1"}, Outcome: VoidVoided}}, "\nevery targeted label is voided: exit status 0\n"},
	} {
		var b strings.Builder
		r := &VoidReport{RunID: 1, Category: DuplicateCharge, Items: tc.items, Counts: map[string]int{}}
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(b.String(), tc.want) {
			t.Errorf("items %v: report\n%s\nwant it to end %q", tc.items, b.String(), tc.want)
		}
	}
}
