package reconcile

import "testing"

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
