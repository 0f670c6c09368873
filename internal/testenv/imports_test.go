package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// testenv starts coordinators, workers and SDK clients for tests; no
// package of a build depends on it, so none of it reaches a binary.
func TestOnlyTestsImportTestenv(t *testing.T) {
	const self = "github.com/toolbus/toolbus/internal/testenv"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}: {{join .Deps \" \"}}", "./...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, ": ")
		if pkg != self && strings.Contains(" "+deps+" ", " "+self+" ") {
			t.Errorf("%s depends on %s", pkg, self)
		}
	}
}
