package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// section is the text of operations.md from the heading start to the next
// heading of its level or above.
func section(t *testing.T, doc, start string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+start+"\n")
	if i < 0 {
		t.Fatalf("operations.md has no %q", start)
	}
	rest := doc[i+1+len(start):]
	level := strings.Repeat("#", strings.Index(start, " "))
	for _, h := range regexp.MustCompile(`(?m)^#+ `).FindAllStringIndex(rest, -1) {
		if hashes := rest[h[0] : h[1]-1]; len(hashes) <= len(level) {
			return rest[:h[0]]
		}
	}
	return rest
}

// TestImagesFlagTable holds the flag table of "Containers" to
// scripts/images: the same flags, with the documented defaults.
func TestImagesFlagTable(t *testing.T) {
	raw, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "images")
	build := exec.Command("go", "build", "-o", bin, "./scripts/images")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build scripts/images: %v\n%s", err, out)
	}
	rows := flagTable(t, section(t, string(raw), "## Containers"), "the usage: --help is the default command")
	shown := help(t, bin, nil)
	documented := map[string]bool{}
	for _, row := range rows {
		for _, name := range row.names {
			documented[name] = true
			f, ok := shown[name]
			if !ok {
				t.Errorf("operations.md documents go run ./scripts/images --%s, which it does not take", name)
				continue
			}
			if same, compared := sameDefault(row.def, f.def); compared && !same {
				t.Errorf("--%s: operations.md says the default is %q, --help says %q", name, row.def, f.def)
			}
		}
	}
	for name := range shown {
		if !documented[name] {
			t.Errorf("scripts/images takes --%s, which operations.md does not list", name)
		}
	}
}

// TestComposeVariablesTable holds the variables table of "Compose on one
// host" to deploy/compose/compose.yaml: every variable the file reads is
// in the table and every one the table lists is read, with the documented
// default where the row gives one per variable.
func TestComposeVariablesTable(t *testing.T) {
	raw, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	compose, err := os.ReadFile("../deploy/compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inFile := map[string][]string{} // variable: its defaults in the file
	for _, m := range regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*)(?::-([^}]*))?\}`).FindAllStringSubmatch(string(compose), -1) {
		if !slices.Contains(inFile[m[1]], m[2]) {
			inFile[m[1]] = append(inFile[m[1]], m[2])
		}
	}
	if len(inFile) < 5 {
		t.Fatalf("found %d variables in compose.yaml: %v", len(inFile), inFile)
	}
	doc := section(t, string(raw), "### Compose on one host")
	start := strings.Index(doc, "| variable | default |")
	if start < 0 {
		t.Fatal(`operations.md's "Compose on one host" has no table of variables`)
	}
	quoted := regexp.MustCompile("`([^`]+)`")
	inDoc := map[string]bool{}
	for _, line := range strings.Split(doc[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		var names []string
		prefix := ""
		for _, m := range quoted.FindAllStringSubmatch(cells[0], -1) {
			name := m[1]
			if strings.HasPrefix(name, "_") { // `TOOLBUS_PROBE_COORDINATOR_1`, `_COORDINATOR_2`: the first name's prefix
				name = prefix + name
			} else if i := strings.LastIndex(strings.TrimRight(name, "_0123456789"), "_"); i > 0 {
				prefix = name[:i]
			}
			names = append(names, name)
		}
		var defaults []string
		for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
			defaults = append(defaults, m[1])
		}
		for i, name := range names {
			inDoc[name] = true
			got, ok := inFile[name]
			if !ok {
				t.Errorf("operations.md lists %s, which compose.yaml does not read", name)
				continue
			}
			var want string
			switch {
			case len(names) == len(defaults):
				want = defaults[i]
			case len(names) == 1 && len(defaults) > 0:
				want = defaults[0]
			default:
				continue // a range, such as `127.0.0.1:9101` … `9106`
			}
			for _, g := range got {
				if g != want {
					t.Errorf("compose.yaml defaults %s to %q, operations.md to %q", name, g, want)
				}
			}
		}
	}
	var missing []string
	for name := range inFile {
		if !inDoc[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("compose.yaml reads %v, which operations.md's table does not list", missing)
	}
}
