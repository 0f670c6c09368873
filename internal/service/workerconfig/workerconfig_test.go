package workerconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/sources/mcp"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
)

func TestLoadExample(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "worker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	nss, err := cfg.WorkerNamespaces(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(nss) != 3 {
		t.Fatalf("%d namespaces, want 3", len(nss))
	}
	demo, everything, pets := nss[0], nss[1], nss[2]
	if demo.Name != "demo" || len(demo.Tools) == 0 || len(demo.Sources) != 0 {
		t.Errorf("demo namespace %+v", demo)
	}
	if everything.Slots != 8 || everything.MaxAttempts != 2 || everything.MaxConcurrency != 64 {
		t.Errorf("everything limits %d %d %d", everything.Slots, everything.MaxAttempts, everything.MaxConcurrency)
	}
	if len(everything.Sources) != 2 {
		t.Fatalf("everything has %d sources", len(everything.Sources))
	}
	for i, name := range []string{"local", "remote"} {
		src, ok := everything.Sources[i].(*mcp.Source)
		if !ok || src.Name() != name {
			t.Errorf("source %d is %T %v, want MCP server %s", i, everything.Sources[i], everything.Sources[i].Name(), name)
		}
	}
	local := cfg.mcpConfig("everything", cfg.Namespaces[1].Sources[0].MCP, nil)
	if want, _ := filepath.Abs(filepath.Join("testdata", "..", "node_modules", ".bin", "mcp-server-everything")); local.Command != want {
		t.Errorf("command %q, want it relative to the file: %q", local.Command, want)
	}
	if len(local.Env) != 1 || local.Env[0] != "LOG_LEVEL=debug" {
		t.Errorf("env %q", local.Env)
	}
	if src, ok := pets.Sources[0].(*openapi.Source); !ok || src.Name() != "petstore" {
		t.Errorf("pets source %T", pets.Sources[0])
	}
}

// TestRelativeCommand: a command with a / is the file next to the
// configuration, even for "./server" in a file named without a directory,
// which a cleaned path would turn into a bare name looked up in PATH.
func TestRelativeCommand(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, command, want string }{
		{"w.yaml", "./server", filepath.Join(wd, "server")},
		{"w.yaml", "bin/server", filepath.Join(wd, "bin", "server")},
		{"conf/w.yaml", "./server", filepath.Join(wd, "conf", "server")},
		{"/etc/toolbus/w.yaml", "../server", "/etc/server"},
	} {
		cfg, err := Parse(tc.file, []byte("namespaces:\n  - name: x\n    sources:\n      - mcp: {name: s, command: "+tc.command+", dir: work}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.mcpConfig("x", cfg.Namespaces[0].Sources[0].MCP, nil).Command; got != tc.want {
			t.Errorf("%s in %s: command %q, want %q", tc.command, tc.file, got, tc.want)
		}
	}
}

func TestBareCommandUsesPath(t *testing.T) {
	cfg, err := Parse("dir/w.yaml", []byte("namespaces:\n  - name: x\n    sources:\n      - mcp: {name: s, command: npx, args: [-y, server]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.mcpConfig("x", cfg.Namespaces[0].Sources[0].MCP, nil).Command; got != "npx" {
		t.Errorf("command %q, want npx looked up in PATH", got)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // each must appear in the error
	}{
		{"empty", "", []string{"w.yaml: the file is empty"}},
		{"not YAML", "namespaces: [", []string{"w.yaml:1: "}},
		{"unknown field", `
namespaces:
  - name: x
    sources:
      - mcp: {name: s, comand: srv}
`, []string{`w.yaml:5: unknown field "comand"`}},
		{"no namespaces", "namespaces: []\n", []string{"w.yaml:1: namespaces: list at least one namespace"}},
		{"bad namespace", `
namespaces:
  - name: a-b
    sources: [{demo: true}]
`, []string{`w.yaml:3: namespaces[0].name: invalid namespace "a-b"`}},
		{"source with two kinds", `
namespaces:
  - name: x
    sources:
      - demo: true
        mcp: {name: s, command: srv}
`, []string{"w.yaml:5: namespaces[0].sources[0]: a source is exactly one of"}},
		{"stdio without command", `
namespaces:
  - name: x
    sources:
      - mcp:
          name: s
          transport: stdio
`, []string{"namespaces[0].sources[0].mcp.command: the stdio transport needs a command"}},
		{"http without url", `
namespaces:
  - name: x
    sources:
      - mcp:
          name: s
          transport: http
          args: [a]
`, []string{"w.yaml:6: namespaces[0].sources[0].mcp.url: the http transport needs a url", "w.yaml:8: namespaces[0].sources[0].mcp.args: goes with the stdio transport, not http"}},
		{"unknown transport", `
namespaces:
  - name: x
    sources:
      - mcp: {name: s, transport: websocket, url: "http://h/"}
`, []string{`mcp.transport: unknown transport "websocket"`}},
		{"duplicate source names", `
namespaces:
  - name: x
    sources:
      - mcp: {name: s, command: a}
      - openapi: {name: s, spec: b.yaml}
`, []string{"namespaces[0].sources[1].openapi.name: another source of the namespace is named s"}},
		{"openapi auth", `
namespaces:
  - name: x
    sources:
      - openapi:
          name: api
          spec: api.yaml
          auth: {api_key_env: KEY}
`, []string{"w.yaml:8: namespaces[0].sources[0].openapi.auth: an API key goes in exactly one of a header and a query parameter"}},
		{"unknown delivery", `
namespaces:
  - name: x
    sources:
      - mcp:
          name: s
          command: srv
          delivery: exactly_once
`, []string{`w.yaml:8: namespaces[0].sources[0].mcp.delivery: unknown delivery "exactly_once": use at_least_once or at_most_once`}},
		{"unknown tool delivery", `
namespaces:
  - name: x
    sources:
      - openapi:
          name: api
          spec: api.yaml
          tools:
            deletePet: {delivery: twice}
            getPet: {}
`, []string{`w.yaml:9: namespaces[0].sources[0].openapi.tools.deletePet.delivery: unknown delivery "twice"`,
			`w.yaml:10: namespaces[0].sources[0].openapi.tools.getPet: set at least one of name, title, description, tags and delivery`}},
		{"tool selection and renames", `
namespaces:
  - name: x
    sources:
      - mcp:
          name: s
          command: srv
          include: {}
          exclude: {names: ["", "get-*"], tags: ["bad\ttag"]}
          tools:
            get-sum: {name: add}
            get-total: {name: add}
            echo: {name: "say it"}
            list: {name: lookup}
            lookup: {title: Look up}
            long: {name: ` + strings.Repeat("n", 63) + `}
            titled: {title: "two\nlines"}
            tagged: {tags: [""]}
`, []string{
			"w.yaml:8: namespaces[0].sources[0].mcp.include: list names (patterns) or tags, or leave include out",
			"w.yaml:9: namespaces[0].sources[0].mcp.exclude.names[0]: an empty pattern",
			`w.yaml:9: namespaces[0].sources[0].mcp.exclude.tags[0]: invalid tag "bad\ttag": must not hold control characters`,
			"namespaces[0].sources[0].mcp.tools.get-total.name: tools get-sum and get-total are both renamed add",
			`w.yaml:13: namespaces[0].sources[0].mcp.tools.echo.name: invalid method "say it": must be non-empty and hold only letters, digits, '_' and '-'`,
			"namespaces[0].sources[0].mcp.tools.list.name: tool lookup already has the name lookup: rename it too, or choose another name",
			"namespaces[0].sources[0].mcp.tools.long.name: invalid tool name \"x-" + strings.Repeat("n", 63) + "\": is 65 characters; at most 64",
			"namespaces[0].sources[0].mcp.tools.titled.title: a title is one line of at most 256 bytes",
			`w.yaml:18: namespaces[0].sources[0].mcp.tools.tagged.tags[0]: invalid tag "": must be 1 to 128 bytes of UTF-8`,
		}},
		{"unknown key of a tool", `
namespaces:
  - name: x
    sources:
      - openapi:
          name: api
          spec: api.yaml
          include: {names: [list*], operations: [GET]}
          tools:
            listPets: {nickname: list}
`, []string{`w.yaml:8: unknown field "operations"`, `w.yaml:10: unknown field "nickname"`}},
		{"a comma in a flow mapping's value", `
namespaces:
  - name: x
    sources:
      - openapi:
          name: api
          spec: api.yaml
          tools:
            listPets: {description: Lists pets, by name.}
`, []string{`w.yaml:9: unknown field "by name."`}},
		{"namespace listed twice, demo twice", `
namespaces:
  - name: x
    sources:
      - demo: true
      - demo: true
  - name: x
    sources:
      - demo: true
`, []string{"w.yaml:6: namespaces[0].sources[1].demo: the demo tools are listed twice", "w.yaml:7: namespaces[1].name: namespace x is listed twice"}},
		{"keys of the other transport", `
namespaces:
  - name: x
    sources:
      - mcp: {name: a, url: "https://mcp.example.com/mcp", env: {K: v}, dir: work}
      - mcp: {name: b, command: srv, headers: {X-A: b}}
      - mcp: {name: c, url: "ftp://example.com/mcp"}
`, []string{"namespaces[0].sources[0].mcp.env: goes with the stdio transport, not http", "namespaces[0].sources[0].mcp.dir: goes with the stdio transport, not http",
			"namespaces[0].sources[1].mcp.headers: go with the sse and http transports, not stdio", `namespaces[0].sources[2].mcp.url: "ftp://example.com/mcp" is not an http or https URL`}},
		{"negative slots", `
namespaces:
  - name: x
    slots: -1
    sources: [{demo: true}]
`, []string{"w.yaml:4: namespaces[0].slots: must be positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("w.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			var cfgErr *Error
			if !errors.As(err, &cfgErr) {
				t.Errorf("error %T is not an *Error", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error\n%v\ndoes not say %q", err, want)
				}
			}
		})
	}
}

func TestHeaderValues(t *testing.T) {
	t.Setenv("TOOLBUS_TEST_REMOTE_TOKEN", "t0ken")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "team"), []byte("tools\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "w.yaml")
	cfg, err := Parse(file, []byte(`
namespaces:
  - name: x
    sources:
      - mcp:
          name: remote
          url: https://mcp.example.com/mcp
          headers: {Authorization: "Bearer ${TOOLBUS_TEST_REMOTE_TOKEN}", X-Team: "file:team"}
`))
	if err != nil {
		t.Fatal(err)
	}
	headers, err := cfg.headers("x", "mcp", "remote", cfg.Namespaces[0].Sources[0].MCP.Headers)
	if err != nil || headers["Authorization"] != "Bearer t0ken" || headers["X-Team"] != "tools" {
		t.Fatalf("headers %v, %v", headers, err)
	}

	// A value read for a header that spans lines would let it add headers
	// of its own (or fail every request): the start stops, without quoting
	// the value.
	if err := os.WriteFile(filepath.Join(dir, "two-lines"), []byte("t0ken\nX-Injected: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOOLBUS_TEST_SPLIT_TOKEN", "t0ken\r\nX-Injected: 1")
	for _, tc := range []struct{ value, want string }{
		{"${TOOLBUS_TEST_UNSET_TOKEN}", file + ": namespace x: openapi source pets: header Authorization: environment variable is not set: TOOLBUS_TEST_UNSET_TOKEN"},
		{"file:two-lines", file + ": namespace x: openapi source pets: header Authorization: the value holds a control character (byte 5 is 0xa): a header's value is one line"},
		{"Bearer ${TOOLBUS_TEST_SPLIT_TOKEN}", file + ": namespace x: openapi source pets: header Authorization: the value holds a control character (byte 12 is 0xd): a header's value is one line"},
		{`a\nb`, file + ": namespace x: openapi source pets: header Authorization: the value holds a control character (byte 1 is 0xa): a header's value is one line"},
		{"file:nowhere", file + ": namespace x: openapi source pets: header Authorization: read open " + filepath.Join(dir, "nowhere") + ": no such file or directory"},
	} {
		cfg, err := Parse(file, []byte("namespaces:\n  - name: x\n    sources:\n      - openapi: {name: pets, spec: pets.yaml, headers: {Authorization: \""+tc.value+"\"}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.WorkerNamespaces(nil); err == nil || err.Error() != tc.want {
			t.Errorf("%s:\n got %v\nwant %s", tc.value, err, tc.want)
		}
	}
}

func TestRootsAreAbsolute(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Parse(filepath.Join(dir, "w.yaml"), []byte("namespaces:\n  - name: x\n    sources:\n      - mcp: {name: s, command: srv, roots: [project, /srv/data]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.mcpConfig("x", cfg.Namespaces[0].Sources[0].MCP, nil).Roots
	if len(got) != 2 || got[0] != filepath.Join(dir, "project") || got[1] != "/srv/data" {
		t.Errorf("roots %q", got)
	}
}
