package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
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
	// The tests of every package run through internal/testenv/leaks, those
	// of the packages testenv imports included: it imports none of them.
	for dep, chain := range reaches(imports, "internal/testenv/leaks") {
		if strings.HasPrefix(dep, module+"/") {
			t.Errorf("internal/testenv/leaks imports Toolbus: %s", chain)
		}
	}
	// The tests of the packages testenv imports start their servers with
	// internal/testenv/embedded: it imports of Toolbus only natsserver.
	for dep, chain := range reaches(imports, "internal/testenv/embedded") {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/internal/natsserver" {
			t.Errorf("internal/testenv/embedded imports more of Toolbus than natsserver: %s", chain)
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

const leaksPackage = module + "/internal/testenv/leaks"

// TestEveryTestedPackageRunsLeaksMain holds the test harness to what
// docs/architecture.md says: every package of the module with tests has a
// TestMain that runs them through leaks.Main, so that no package's tests
// leave a goroutine running unnoticed, and none runs them another way.
func TestEveryTestedPackageRunsLeaksMain(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	testFiles := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			if _, err := fs.Stat(os.DirFS(path), "go.mod"); path != root && err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			testFiles[filepath.Dir(path)] = append(testFiles[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(testFiles) < 40 {
		t.Fatalf("only %d packages with tests found", len(testFiles))
	}
	for dir, files := range testFiles {
		rel, _ := filepath.Rel(root, dir)
		if problem := leaksMainProblem(t, files); problem != "" {
			t.Errorf("%s: %s", filepath.ToSlash(rel), problem)
		}
	}
}

// leaksMainProblem says what is wrong with the TestMain of the test files
// of one package, or "" when it hands m to leaks.Main and calls m.Run
// nowhere else.
func leaksMainProblem(t *testing.T, files []string) string {
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		leaks := ""
		for _, spec := range f.Imports {
			if p, _ := strconv.Unquote(spec.Path.Value); p == leaksPackage {
				leaks = "leaks"
				if spec.Name != nil {
					leaks = spec.Name.Name
				}
			}
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != "TestMain" {
				continue
			}
			m := fn.Type.Params.List[0].Names[0].Name
			handed, ranElsewhere := false, false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				switch {
				case x.Name == leaks && leaks != "" && sel.Sel.Name == "Main" && len(call.Args) > 0:
					if arg, ok := call.Args[0].(*ast.Ident); ok && arg.Name == m {
						handed = true
					}
				case x.Name == m && sel.Sel.Name == "Run":
					ranElsewhere = true
				}
				return true
			})
			switch {
			case ranElsewhere:
				return filepath.Base(path) + ": TestMain runs the tests itself; leaks.Main(m) runs them"
			case !handed:
				return filepath.Base(path) + ": TestMain does not call leaks.Main(m)"
			}
			return ""
		}
	}
	return "tests without a TestMain: add func TestMain(m *testing.M) { leaks.Main(m) }"
}
