package editdistance

import "testing"

func TestBetween(t *testing.T) {
	var d Rows
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"items", "items", 0}, {"itemz", "items", 1}, {"item", "items", 1},
		{"bundle", "bundles", 1}, {"callExposure", "items", 11}, {"kitten", "sitting", 3}, {"", "abc", 3},
	} {
		if got := d.Between(tc.a, tc.b); got != tc.want {
			t.Errorf("Between(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
