package transport_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// jetStreamAPI is the prefix of JetStream's API subjects, built so that
// this file does not contain it.
var jetStreamAPI = []byte("$" + "JS.API")

// No package but this one builds JetStream API subjects. Test files are
// not checked: tests elsewhere may name those subjects to check that NATS
// permissions refuse them (test/integration/permissions_test.go).
func TestOnlyTransportBuildsJetStreamAPISubjects(t *testing.T) {
	root := moduleRoot(t)
	var offending []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, "internal/wire/transport/") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, jetStreamAPI) {
			offending = append(offending, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range offending {
		t.Errorf("%s builds JetStream API subjects: move that exchange into internal/wire/transport", rel)
	}
}

// moduleRoot returns the directory of the go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
