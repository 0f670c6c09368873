package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// testenv starts coordinators, workers and SDK clients for tests, and
// its packages (leaks) check what tests left behind; no package of a
// build depends on them, so none of them reaches a binary.
func TestOnlyTestsImportTestenv(t *testing.T) {
	const self = "github.com/toolbus/toolbus/internal/dev/testenv"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}: {{join .Deps \" \"}}", "./...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	ours := func(pkg string) bool { return pkg == self || strings.HasPrefix(pkg, self+"/") }
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, ": ")
		if ours(pkg) {
			continue
		}
		for _, dep := range strings.Fields(deps) {
			if ours(dep) {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
