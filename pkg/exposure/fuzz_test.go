package exposure

import (
	"errors"
	"testing"
	"testing/fstest"

	"github.com/toolbus/toolbus/pkg/messages"
)

// FuzzLoadWorkspace checks that any bundle and agent file either loads or
// fails with a ValidationError, and that a loaded workspace resolves.
func FuzzLoadWorkspace(f *testing.F) {
	f.Add([]byte(catalogBundle), []byte(analystAgent))
	f.Add([]byte(systemBundle), []byte("id: a\ntool: {bundles: [system], items: [{name: '*', tier: critical}]}\n"))
	f.Add([]byte("id: x\nmatch: [{name: 'a:*', exclude: ['a:b'], approval: {mode: queue}}]\n"), []byte("id: b\ntool: 7\n"))
	f.Add([]byte("&a [*a]"), []byte("id: [\n"))
	f.Fuzz(func(t *testing.T, bundle, agent []byte) {
		fsys := fstest.MapFS{
			"bundles/b.yaml": {Data: bundle},
			"agents/a.yaml":  {Data: agent},
		}
		ws, err := LoadWorkspace(fsys)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.File == "" {
				t.Fatalf("error %v (%T) is not a ValidationError naming a file", err, err)
			}
			return
		}
		cat := catalogOf(1, "a:b", "a:c", "system/os:getenv", "catalog:lookup")
		for _, agent := range []string{"", "a", "b"} {
			v := ws.Admit(agent, cat).Visible(Iteration{Discovered: []string{"a:b"}, Intake: &Intake{Bundles: []string{"x"}}})
			for i := 1; i < len(v.Tools); i++ {
				if v.Tools[i-1].Name >= v.Tools[i].Name {
					t.Fatalf("visible tools not sorted: %v", v.Names())
				}
			}
		}
	})
}

// FuzzParsePattern checks that patterns parse or fail cleanly, and that a
// pattern without '*' matches exactly the tool it names.
func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"catalog", "catalog:lookup", "a/b:c", "system/exec", "*:list", "ns.get-item", "x**y:*z*", ":", "a-"} {
		f.Add(s, "catalog-lookup")
	}
	f.Fuzz(func(t *testing.T, pattern, tool string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			return
		}
		n, err := messages.ParseToolName(tool)
		if err != nil {
			return
		}
		got := p.Match(n)
		ns, nsLiteral := p.namespace.Literal()
		method, methodLiteral := p.method.Literal()
		if nsLiteral && methodLiteral {
			want := ns == n.Namespace && method == n.Method
			if got != want {
				t.Fatalf("%q matches %q = %v, want %v", pattern, tool, got, want)
			}
		}
		if got && nsLiteral && ns != n.Namespace {
			t.Fatalf("%q matches %q across namespaces", pattern, tool)
		}
	})
}
