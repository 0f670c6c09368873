package docs

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/policy"
)

func readPolicyDoc(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("policy.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

// TestPolicyPresetsAsDocumented: policy.md writes out every preset's rule,
// exactly as pkg/policy defines it, and no preset that does not exist.
func TestPolicyPresetsAsDocumented(t *testing.T) {
	doc := readPolicyDoc(t)
	blocks := regexp.MustCompile("(?s)<!-- preset: (\\w+) -->\\s*```yaml\\n(.*?)```").FindAllStringSubmatch(doc, -1)
	documented := map[string]bool{}
	for _, b := range blocks {
		name, rule := b[1], b[2]
		documented[name] = true
		written, err := policy.Parse([]byte("default: allow\nrules:\n"+indent(rule)), "policy.md")
		if err != nil {
			t.Errorf("preset %s: the documented rule does not load: %v", name, err)
			continue
		}
		want, ok := policy.Preset(name)
		if !ok {
			t.Errorf("policy.md documents the preset %s, which pkg/policy does not define", name)
			continue
		}
		defined, err := policy.New(policy.Allow, want)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(written.Rules(), defined.Rules()) {
			t.Errorf("preset %s: policy.md says\n%+v\npkg/policy has\n%+v", name, written.Rules(), defined.Rules())
		}
		if ref, err := policy.Parse([]byte("default: allow\nrules:\n  - preset: "+name+"\n"), "ref"); err != nil || ref.Version() != written.Version() {
			t.Errorf("preset %s: the documented rule is not what \"- preset: %s\" stands for (%v)", name, name, err)
		}
	}
	for _, name := range policy.Presets() {
		if !documented[name] {
			t.Errorf("policy.md does not write out the preset %s", name)
		}
	}
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// tableKeys returns the keys of the first column of the markdown table
// that follows heading line in doc.
func tableKeys(t *testing.T, doc, after string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, after)
	if !ok {
		t.Fatalf("policy.md has no %q", after)
	}
	var keys []string
	started := false
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		if m := regexp.MustCompile("^\\| `([a-z_]+)` \\|").FindStringSubmatch(line); m != nil {
			keys = append(keys, m[1])
		}
	}
	return keys
}

// jsonKeys are the keys of a struct's fields, as their json tags name them.
func jsonKeys(v any) []string {
	var keys []string
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	slices.Sort(keys)
	return keys
}

// TestPolicyKeysAsDocumented: the keys policy.md's tables give the file and
// a rule are the keys pkg/policy's types have, every one of them is read
// by the loader, and a key that is not one is refused. The sub-keys of
// tags and of an argument condition are named in the rule's table.
func TestPolicyKeysAsDocumented(t *testing.T) {
	doc := readPolicyDoc(t)
	top := tableKeys(t, doc, "The file holds one YAML mapping with two keys:")
	if !slices.Equal(top, []string{"default", "rules"}) {
		t.Errorf("policy.md gives the file the keys %v; want default and rules", top)
	}
	ruleKeys := tableKeys(t, doc, "A rule is a mapping of these keys:")
	sorted := slices.Sorted(slices.Values(ruleKeys))
	if want := jsonKeys(policy.Rule{}); !slices.Equal(sorted, want) {
		t.Errorf("policy.md gives a rule the keys %v; policy.Rule has %v", sorted, want)
	}
	_, rows, _ := strings.Cut(doc, "A rule is a mapping of these keys:\n\n")
	rows, _, _ = strings.Cut(rows, "\n\n")
	for _, sub := range append(jsonKeys(policy.TagMatch{}), jsonKeys(policy.Argument{})...) {
		if !strings.Contains(rows, "`"+sub+"`") {
			t.Errorf("policy.md's table of a rule's keys does not name %s", sub)
		}
	}
	for _, key := range append(ruleKeys, "bogus") {
		_, err := policy.Parse([]byte("default: allow\nrules:\n  - {"+key+": x}\n"), "keys.yaml")
		unknown := err != nil && strings.Contains(err.Error(), `unknown field "`+key+`"`)
		if unknown != (key == "bogus") {
			t.Errorf("the loader on key %s: %v", key, err)
		}
	}
	for _, key := range []string{"default", "rules", "bogus"} {
		_, err := policy.Parse([]byte(key+": x\n"), "keys.yaml")
		unknown := err != nil && strings.Contains(err.Error(), `unknown field "`+key+`"`)
		if unknown != (key == "bogus") {
			t.Errorf("the loader on the file's key %s: %v", key, err)
		}
	}
}

// TestPolicyExamplesLoad: every policy in policy.md and README.md loads.
func TestPolicyExamplesLoad(t *testing.T) {
	for _, file := range []string{"policy.md", "../README.md"} {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range regexp.MustCompile("(?s)```yaml\\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
			if !regexp.MustCompile(`(?m)^default:`).MatchString(m[1]) {
				continue
			}
			n++
			if _, err := policy.Parse([]byte(m[1]), file); err != nil {
				t.Errorf("%s: a policy does not load: %v\n%s", file, err, m[1])
			}
		}
		if n == 0 {
			t.Errorf("%s holds no policy", file)
		}
	}
}
