package exposure

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

// TestAlwaysIncludeMustBeABoolean: a value of alwaysInclude other than true
// or false is refused with an error that names the file, the bundle or
// agent, the rule's tools, the key and the values allowed.
func TestAlwaysIncludeMustBeABoolean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, content string
		want                []string
	}{
		{"bundle", "bundles/weather.yaml", "id: weather\nmatch:\n  - name: \"weather:forecast\"\n    alwaysInclude: maybe\n",
			[]string{"bundles/weather.yaml:4", `bundle "weather"`, "match[0]", "alwaysInclude", `"maybe"`, `"weather:forecast"`, "want true or false"}},
		{"agent", "agents/analyst.yaml", "id: analyst\ntool:\n  items:\n    - name: \"mail:send\"\n      alwaysInclude: [yes]\n",
			[]string{"agents/analyst.yaml:5", `agent "analyst"`, "tool.items[0]", "alwaysInclude", `"mail:send"`, "want true or false"}},
	} {
		_, err := LoadWorkspace(fstest.MapFS{tc.file: {Data: []byte(tc.content)}})
		if !errors.Is(err, ErrInvalidWorkspace) {
			t.Fatalf("%s: err = %v", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %s", tc.name, err, w)
			}
		}
	}
	// true and false are fine, in any of YAML's spellings.
	if _, err := LoadWorkspace(fstest.MapFS{"bundles/b.yaml": {Data: []byte("id: b\nmatch:\n  - name: \"a:b\"\n    alwaysInclude: True\n  - name: \"a:c\"\n    alwaysInclude: false\n")}}); err != nil {
		t.Fatal(err)
	}
}
