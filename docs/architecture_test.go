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

// roles are the folders of internal/: a package's folder says what it is.
var roles = []string{"internal/service/", "internal/wire/", "internal/support/", "internal/dev/"}

// TestImportRules holds the package graph to what docs/architecture.md says.
func TestImportRules(t *testing.T) {
	imports := packageImports(t)
	reachesAny := func(pkg string, prefixes ...string) {
		t.Helper()
		for dep, chain := range reaches(imports, pkg) {
			for _, p := range prefixes {
				if strings.HasPrefix(dep, p) {
					t.Errorf("%s reaches %s: %s", pkg, dep, chain)
				}
			}
		}
	}
	// Each folder of internal/ is a role, and says what its packages may
	// reach: the public packages (the SDK among them) nothing that depends
	// on a service.
	for pkg := range imports {
		switch {
		case strings.HasPrefix(pkg, "internal/") && !slices.ContainsFunc(roles, func(r string) bool { return strings.HasPrefix(pkg, r) }):
			t.Errorf("%s is in no role's folder (%s)", pkg, strings.Join(roles, ", "))
		case strings.HasPrefix(pkg, "pkg/"), strings.HasPrefix(pkg, "internal/wire/"):
			reachesAny(pkg, module+"/internal/service/", module+"/internal/dev/", module+"/cmd/")
		case strings.HasPrefix(pkg, "internal/support/"):
			reachesAny(pkg, module+"/internal/service/", module+"/internal/dev/", module+"/internal/wire/", module+"/cmd/", "github.com/nats-io/")
		case strings.HasPrefix(pkg, "internal/service/"):
			reachesAny(pkg, module+"/internal/dev/", module+"/cmd/")
		}
		// Development packages are for tests and the bench only.
		if !strings.HasPrefix(pkg, "internal/dev/") && pkg != "cmd/toolbus-bench" {
			for _, dep := range imports[pkg] {
				if strings.HasPrefix(dep, module+"/internal/dev/") {
					t.Errorf("%s imports %s, which only tests and cmd/toolbus-bench may", pkg, dep)
				}
			}
		}
	}
	// The JSON scanner sits beneath the wire contract, which reads JSON with it.
	for _, imp := range imports["internal/support/jsonparse"] {
		if strings.HasPrefix(imp, module+"/") {
			t.Errorf("internal/support/jsonparse imports %s; it imports no package of Toolbus", imp)
		}
	}
	// The tests of every package run through internal/dev/testenv/leaks, those
	// of the packages testenv imports included: it imports none of them.
	for dep, chain := range reaches(imports, "internal/dev/testenv/leaks") {
		if strings.HasPrefix(dep, module+"/") {
			t.Errorf("internal/dev/testenv/leaks imports Toolbus: %s", chain)
		}
	}
	// The tests of the packages testenv imports start their servers with
	// internal/dev/testenv/embedded: it imports of Toolbus only natsserver.
	for dep, chain := range reaches(imports, "internal/dev/testenv/embedded") {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/internal/wire/natsserver" {
			t.Errorf("internal/dev/testenv/embedded imports more of Toolbus than natsserver: %s", chain)
		}
	}
	for _, pkg := range []string{"pkg/messages", "pkg/exposure", "pkg/policy", "pkg/search", "pkg/toolschema", "pkg/toolformat", "internal/support/schemacost", "internal/support/jsonparse", "internal/support/glob"} {
		if _, ok := imports[pkg]; !ok {
			t.Errorf("pure package %s not found", pkg)
		}
		for dep, chain := range reaches(imports, pkg) {
			if strings.HasPrefix(dep, "github.com/nats-io/") || strings.HasPrefix(dep, module+"/internal/wire/") {
				t.Errorf("pure package %s reaches NATS or the wire: %s", pkg, chain)
			}
		}
	}
	// The provider formats stand on the wire contract and the format names alone.
	for _, imp := range imports["pkg/toolformat"] {
		local, ours := strings.CutPrefix(imp, module+"/")
		if ours && !slices.Contains([]string{"pkg/messages", "pkg/toolschema", "internal/support/jsonparse"}, local) {
			t.Errorf("pkg/toolformat imports %s; it may import pkg/messages, pkg/toolschema and internal/support/jsonparse only", imp)
		}
	}
}

// sourceFile is a non-test Go file of the module, parsed.
type sourceFile struct {
	// path is the file's path within the module; pkg its directory's.
	path, pkg string
	fset      *token.FileSet
	file      *ast.File
}

// sourceFiles parses the module's non-test Go files but those under
// cmd/toolbus-bench, a benchmark harness whose runs are long scripts.
func sourceFiles(t *testing.T) []sourceFile {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []sourceFile
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || rel == "cmd/toolbus-bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, sourceFile{path: rel, pkg: filepath.ToSlash(filepath.Dir(rel)), fset: fset, file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// maxMethods is the most methods, exported and unexported, a named type
// of pkg/, internal/ or cmd/ declares: a type with more holds several
// roles, each of which is better a type of its own.
const maxMethods = 25

// typesWithManyMethods are the types that had more than maxMethods
// methods when the rule came, keyed by package and type, each to be split
// into types of one role each. The list only shrinks: an entry goes once
// its type is split, and no entry is added.
var typesWithManyMethods = map[string]bool{}

// methodCounts counts the methods each named type of the files declares,
// keyed by package and type ("pkg/client.Client").
func methodCounts(files []sourceFile) map[string]int {
	counts := map[string]int{}
	for _, f := range files {
		for _, decl := range f.file.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			if name := receiverType(fd.Recv.List[0].Type); name != "" {
				counts[f.pkg+"."+name]++
			}
		}
	}
	return counts
}

// receiverType is the name of a receiver's type: T of T, *T, T[P] and *T[P].
func receiverType(expr ast.Expr) string {
	for {
		switch e := expr.(type) {
		case *ast.StarExpr:
			expr = e.X
		case *ast.IndexExpr:
			expr = e.X
		case *ast.IndexListExpr:
			expr = e.X
		case *ast.ParenExpr:
			expr = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

// TestTypesHaveFewMethods: no named type of pkg/, internal/ or cmd/ has
// more than maxMethods methods, but those of typesWithManyMethods, each of
// which still has more (an entry for a type already split is reported, so
// that the list shrinks with the splits).
func TestTypesHaveFewMethods(t *testing.T) {
	counts := methodCounts(sourceFiles(t))
	for typ, n := range counts {
		if !strings.HasPrefix(typ, "pkg/") && !strings.HasPrefix(typ, "internal/") && !strings.HasPrefix(typ, "cmd/") {
			continue
		}
		if n > maxMethods && !typesWithManyMethods[typ] {
			t.Errorf("%s has %d methods, more than %d: give its parts of one role each a type of their own", typ, n, maxMethods)
		}
	}
	for typ := range typesWithManyMethods {
		if counts[typ] <= maxMethods {
			t.Errorf("%s has %d methods, no more than %d: remove it from typesWithManyMethods", typ, counts[typ], maxMethods)
		}
	}
}

// maxFuncLines is the most lines a function declaration spans, from its
// func line to its closing brace.
const maxFuncLines = 120

// longFuncs are the functions that were longer than maxFuncLines when the
// rule came, keyed by file and name (a method by its name alone), each to
// be cut into parts that say what they do. The list only shrinks.
var longFuncs = map[string]bool{}

// funcLengths measures each function declaration of the files, keyed as
// longFuncs is.
func funcLengths(files []sourceFile) map[string]int {
	lengths := map[string]int{}
	for _, f := range files {
		for _, decl := range f.file.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				key := f.path + " " + fd.Name.Name
				lengths[key] = max(lengths[key], f.fset.Position(fd.End()).Line-f.fset.Position(fd.Pos()).Line+1)
			}
		}
	}
	return lengths
}

// TestFunctionsAreShort: no function of the module but cmd/toolbus-bench's
// spans more than maxFuncLines lines, but those of longFuncs, each of
// which still does (an entry for a function already cut is reported).
func TestFunctionsAreShort(t *testing.T) {
	lengths := funcLengths(sourceFiles(t))
	for fn, n := range lengths {
		if n > maxFuncLines && !longFuncs[fn] {
			t.Errorf("%s is %d lines long, more than %d: cut it into functions that say what each part does", fn, n, maxFuncLines)
		}
	}
	for fn := range longFuncs {
		if lengths[fn] <= maxFuncLines {
			t.Errorf("%s is %d lines long, no more than %d: remove it from longFuncs", fn, lengths[fn], maxFuncLines)
		}
	}
}

const leaksPackage = module + "/internal/dev/testenv/leaks"

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
