package workerconfig

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// yamlBlocks returns the ```yaml blocks of a Markdown file that hold a
// worker configuration (a top-level namespaces key).
func yamlBlocks(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, part := range strings.Split(string(data), "```yaml\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if strings.HasPrefix(block, "namespaces:") {
			out = append(out, block)
		}
	}
	return out
}

// TestDocumentedExamplesParse reads the configuration examples of
// docs/workers.md and the README as a user copying them would: strictly,
// with their secrets set, and builds their namespaces.
func TestDocumentedExamplesParse(t *testing.T) {
	t.Setenv("REMOTE_TOKEN", "t0ken")
	t.Setenv("TENANT", "acme")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "remote-key"), []byte("k3y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	examples := 0
	for _, doc := range []string{"../../../docs/workers.md", "../../../README.md"} {
		blocks := yamlBlocks(t, doc)
		if len(blocks) == 0 {
			t.Errorf("%s has no worker configuration example", doc)
		}
		for _, block := range blocks {
			examples++
			cfg, err := Parse(filepath.Join(dir, "worker.yaml"), []byte(block))
			if err != nil {
				t.Errorf("%s: the example does not parse: %v\n%s", doc, err, block)
				continue
			}
			if _, err := cfg.WorkerNamespaces(nil); err != nil {
				t.Errorf("%s: the example's namespaces: %v", doc, err)
			}
		}
	}
	if examples < 2 {
		t.Errorf("%d examples found", examples)
	}
}

// TestKeysTableIsComplete compares the keys table of docs/workers.md with
// the keys the decoder accepts: every key is documented, and every
// documented key exists.
func TestKeysTableIsComplete(t *testing.T) {
	data, err := os.ReadFile("../../../docs/workers.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(data), "### Keys")
	table, _, _ = strings.Cut(table, "\n\n`")
	documented := map[string]bool{}
	cell := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}
	accepted := map[string]bool{}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() == reflect.Map && typ.Elem().Kind() == reflect.Struct {
			walk(prefix+".<name>", typ.Elem())
			return
		}
		if typ.Kind() != reflect.Struct {
			accepted[prefix] = true
			return
		}
		for i := range typ.NumField() {
			tag := typ.Field(i).Tag.Get("yaml")
			if tag == "" {
				continue
			}
			key := tag
			switch {
			case typ == reflect.TypeFor[Namespace]():
				key = "namespaces[]." + tag
			case typ == reflect.TypeFor[Config](), typ == reflect.TypeFor[Source]():
			default:
				key = prefix + "." + tag
			}
			if typ == reflect.TypeFor[Namespace]() && tag == "sources" {
				accepted[key] = true
				walk("", typ.Field(i).Type)
				continue
			}
			walk(key, typ.Field(i).Type)
		}
	}
	walk("", reflect.TypeFor[Config]())
	accepted["namespaces"] = true // the list itself, whose items the walk named
	var missing, unknown []string
	for key := range accepted {
		if !documented[key] {
			missing = append(missing, key)
		}
	}
	for key, ok := range documented {
		if ok && !accepted[key] {
			unknown = append(unknown, key)
		}
	}
	slices.Sort(missing)
	slices.Sort(unknown)
	if len(missing) > 0 || len(unknown) > 0 {
		t.Errorf("keys accepted but not in the table: %v\nkeys in the table the decoder refuses: %v\n(accepted: %v)", missing, unknown, slices.Sorted(maps.Keys(accepted)))
	}
}
