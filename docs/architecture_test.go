package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/toolbus/toolbus"

// packageImports reads the imports of every package of the module from its
// non-test files, keyed by the package's path within the module.
func packageImports(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string][]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if !slices.Contains(imports[pkg], p) {
				imports[pkg] = append(imports[pkg], p)
			}
		}
		if _, ok := imports[pkg]; !ok {
			imports[pkg] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return imports
}

// reaches returns every import path that pkg depends on, directly or
// through other packages of the module, with the chain that leads to each.
func reaches(imports map[string][]string, pkg string) map[string]string {
	chains := map[string]string{}
	var visit func(p, chain string)
	visit = func(p, chain string) {
		for _, imp := range imports[p] {
			if _, seen := chains[imp]; seen {
				continue
			}
			next := chain + " -> " + imp
			chains[imp] = next
			if local, ok := strings.CutPrefix(imp, module+"/"); ok {
				visit(local, next)
			}
		}
	}
	visit(pkg, pkg)
	return chains
}

// TestImportRules holds the package graph to what docs/architecture.md says.
func TestImportRules(t *testing.T) {
	imports := packageImports(t)
	services := []string{"internal/coordinator", "internal/indexer", "internal/devstack", "internal/testenv", "internal/workerconfig", "internal/demo", "internal/admin", "cmd/"}
	for _, pkg := range []string{"pkg/client", "pkg/worker"} {
		for dep, chain := range reaches(imports, pkg) {
			for _, s := range services {
				if strings.HasPrefix(dep, module+"/"+s) {
					t.Errorf("%s imports the service package %s: %s", pkg, dep, chain)
				}
			}
		}
	}
	// The JSON scanner sits beneath the wire contract, which reads JSON with it.
	for _, imp := range imports["internal/jsonparse"] {
		if strings.HasPrefix(imp, module+"/") {
			t.Errorf("internal/jsonparse imports %s; it imports no package of Toolbus", imp)
		}
	}
	for _, pkg := range []string{"pkg/messages", "pkg/exposure", "pkg/policy", "pkg/search", "pkg/toolschema", "internal/schemacost", "internal/jsonparse", "internal/glob"} {
		if _, ok := imports[pkg]; !ok {
			t.Errorf("pure package %s not found", pkg)
		}
		for dep, chain := range reaches(imports, pkg) {
			if strings.HasPrefix(dep, "github.com/nats-io/") || strings.HasPrefix(dep, module+"/internal/transport") {
				t.Errorf("pure package %s reaches NATS: %s", pkg, chain)
			}
		}
	}
}
