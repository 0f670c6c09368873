package exposure

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

const catalogBundle = `id: catalog
title: Catalog
description: Look things up.
iconRef: catalog
iconURI: workspace://icons/catalog.png
priority: 10
match:
  - name: "catalog:lookup"
    tier: critical
  - name: "catalog:details"
    tier: onDemand
  - name: "catalog:help"
    tier: onDemand
    alwaysInclude: true
`

const systemBundle = `id: system
match:
  - name: "system/os:*"
    exclude: ["system/os:setenv"]
    approval:
      mode: prompt
      title: Read the environment?
      message: The agent wants to read an environment variable.
    async:
      enabled: true
      notify: true
      pollIntervalMs: 1500
`

const analystAgent = `id: analyst
model: some-model
prompt: |
  Other parts of the system own these fields.
tool:
  callExposure: turn
  bundles: [catalog, system]
  items:
    - name: "catalog:details"
      tier: onDemand
`

func TestLoadWorkspace(t *testing.T) {
	fsys := fstest.MapFS{
		"bundles/catalog.yaml": {Data: []byte(catalogBundle)},
		"bundles/system.yml":   {Data: []byte(systemBundle)},
		"bundles/README.md":    {Data: []byte("not a bundle")},
		"agents/analyst.yaml":  {Data: []byte(analystAgent)},
	}
	ws, err := LoadWorkspace(fsys)
	if err != nil {
		t.Fatalf("LoadWorkspace: %v", err)
	}
	b, ok := ws.Bundle("catalog")
	if !ok || b.Title != "Catalog" || b.IconURI != "workspace://icons/catalog.png" || b.Priority != 10 || len(b.Match) != 3 {
		t.Errorf("catalog bundle = %+v", b)
	}
	if !b.Match[2].AlwaysInclude || b.Match[2].Tier != TierOnDemand {
		t.Errorf("help rule = %+v", b.Match[2])
	}
	var ids []string
	for _, b := range ws.Bundles() {
		ids = append(ids, b.ID)
	}
	assertNames(t, "bundles by priority", ids, []string{"catalog", "system"})
	a, ok := ws.Agent("analyst")
	if !ok || len(a.Tool.Items) != 1 || len(a.Tool.Bundles) != 2 {
		t.Errorf("agent = %+v", a)
	}

	adm := ws.Admit("analyst", catalogOf(1, "catalog:lookup", "catalog:details", "catalog:help", "system/os:getenv", "system/os:setenv"))
	assertNames(t, "visible", adm.Visible(Iteration{}).Names(), []string{"catalog-help", "catalog-lookup", "system_os-getenv"})
	getenv := mustLookup(t, adm, "system_os-getenv")
	if getenv.Approval == nil || getenv.Approval.Mode != ApprovalPrompt || getenv.Approval.Message == "" {
		t.Errorf("approval = %+v", getenv.Approval)
	}
	if getenv.Async == nil || !getenv.Async.Enabled || !getenv.Async.Notify || getenv.Async.PollIntervalMS != 1500 {
		t.Errorf("async = %+v", getenv.Async)
	}
	if !adm.Excluded("system/os:setenv") {
		t.Error("setenv is not excluded")
	}
}

func TestLoadWorkspaceEmpty(t *testing.T) {
	ws, err := LoadWorkspace(fstest.MapFS{})
	if err != nil {
		t.Fatal(err)
	}
	assertNames(t, "derived", ws.Admit("x", catalogOf(1, "a:b")).Visible(Iteration{}).Names(), []string{"a-b"})
}

func TestLoadWorkspaceErrors(t *testing.T) {
	good := catalogBundle
	cases := []struct {
		name  string
		files map[string]string
		// want holds the fields of the first ValidationError.
		want ValidationError
		// text must appear in the error message.
		text string
	}{
		{
			name:  "19 unknown tier",
			files: map[string]string{"bundles/catalog.yaml": strings.Replace(good, "tier: onDemand\n  - name: \"catalog:help\"", "tier: sometimes\n  - name: \"catalog:help\"", 1)},
			want:  ValidationError{File: "bundles/catalog.yaml", Line: 10, Bundle: "catalog", Rule: 1, Field: "tier"},
			text:  `bundles/catalog.yaml:10: bundle "catalog": match[1]: tier: unknown tier "sometimes"`,
		},
		{
			name:  "unknown tier in agent items",
			files: map[string]string{"bundles/catalog.yaml": good, "agents/a.yaml": "id: a\ntool:\n  items:\n    - name: catalog:help\n    - name: catalog:x\n      tier: Critical\n"},
			want:  ValidationError{File: "agents/a.yaml", Line: 5, Agent: "a", Rule: 1, Field: "tier"},
			text:  `agents/a.yaml:5: agent "a": tool.items[1]: tier: unknown tier "Critical"`,
		},
		{
			name:  "empty match",
			files: map[string]string{"bundles/e.yaml": "id: e\nmatch: []\n"},
			want:  ValidationError{File: "bundles/e.yaml", Line: 1, Bundle: "e", Rule: -1, Field: "match"},
			text:  "match: is empty",
		},
		{
			name:  "missing match",
			files: map[string]string{"bundles/e.yaml": "id: e\ntitle: E\n"},
			want:  ValidationError{File: "bundles/e.yaml", Line: 1, Bundle: "e", Rule: -1, Field: "match"},
		},
		{
			name:  "rule without name",
			files: map[string]string{"bundles/e.yaml": "id: e\nmatch:\n  - tier: base\n"},
			want:  ValidationError{File: "bundles/e.yaml", Line: 3, Bundle: "e", Rule: 0, Field: "name"},
			text:  "name: is empty",
		},
		{
			name:  "bad iconURI",
			files: map[string]string{"bundles/e.yaml": "id: e\niconURI: https://example.invalid/x.png\nmatch:\n  - name: a\n"},
			want:  ValidationError{File: "bundles/e.yaml", Line: 1, Bundle: "e", Rule: -1, Field: "iconURI"},
			text:  `must start with "workspace://"`,
		},
		{
			name:  "iconURI escaping the workspace",
			files: map[string]string{"bundles/e.yaml": "id: e\niconURI: workspace://../secret.png\nmatch:\n  - name: a\n"},
			want:  ValidationError{File: "bundles/e.yaml", Line: 1, Bundle: "e", Rule: -1, Field: "iconURI"},
		},
		{
			name:  "duplicate bundle ID",
			files: map[string]string{"bundles/a.yaml": "id: same\nmatch:\n  - name: a\n", "bundles/b.yaml": "id: same\nmatch:\n  - name: b\n"},
			want:  ValidationError{File: "bundles/b.yaml", Line: 1, Bundle: "same", Rule: -1, Field: "id"},
			text:  "duplicate bundle ID",
		},
		{
			name:  "unparsable pattern",
			files: map[string]string{"bundles/p.yaml": "id: p\nmatch:\n  - name: ok\n  - name: \"bad pattern:x\"\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 4, Bundle: "p", Rule: 1, Field: "name"},
			text:  `pattern "bad pattern:x"`,
		},
		{
			name:  "unparsable exclude",
			files: map[string]string{"bundles/p.yaml": "id: p\nmatch:\n  - name: ok\n    exclude: [\"ok:\"]\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 3, Bundle: "p", Rule: 0, Field: "exclude[0]"},
		},
		{
			name:  "unknown approval mode",
			files: map[string]string{"bundles/p.yaml": "id: p\nmatch:\n  - name: ok\n    approval: {mode: maybe}\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 3, Bundle: "p", Rule: 0, Field: "approval.mode"},
		},
		{
			name:  "misspelt rule field",
			files: map[string]string{"bundles/p.yaml": "id: p\nmatch:\n  - name: ok\n    alwaysinclude: true\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 4, Bundle: "p", Rule: 0, Field: "alwaysinclude"},
			text:  "unknown field",
		},
		{
			name:  "misspelt approval field",
			files: map[string]string{"bundles/p.yaml": "id: p\nmatch:\n  - name: ok\n    approval:\n      mode: prompt\n      titel: x\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 6, Bundle: "p", Rule: 0, Field: "approval.titel"},
		},
		{
			name:  "unknown bundle field",
			files: map[string]string{"bundles/p.yaml": "id: p\nrules:\n  - name: ok\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 2, Bundle: "p", Rule: -1, Field: "rules"},
		},
		{
			name:  "wrong value type",
			files: map[string]string{"bundles/p.yaml": "id: p\npriority: high\nmatch:\n  - name: ok\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 2, Rule: -1},
			text:  "cannot unmarshal",
		},
		{
			name:  "alwaysInclude neither true nor false",
			files: map[string]string{"bundles/p.yaml": "id: p\nmatch:\n  - name: ok\n    alwaysInclude: sometimes\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 4, Bundle: "p", Rule: 0, Field: "alwaysInclude"},
			text:  `bundles/p.yaml:4: bundle "p": match[0]: alwaysInclude: "sometimes" is not allowed (in the rule for "ok"); want true or false`,
		},
		{
			name: "YAML syntax error",
			// The line is the parser's: here, the one before the unclosed sequence.
			files: map[string]string{"bundles/p.yaml": "id: p\nmatch:\n  - name: [unclosed\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 2, Rule: -1},
			text:  "did not find expected",
		},
		{
			name:  "empty file",
			files: map[string]string{"bundles/p.yaml": ""},
			want:  ValidationError{File: "bundles/p.yaml", Rule: -1},
			text:  "file is empty",
		},
		{
			name:  "two documents",
			files: map[string]string{"bundles/p.yaml": "id: p\nmatch: [{name: a}]\n---\nid: q\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 3, Rule: -1},
			text:  "more than one YAML document",
		},
		{
			name:  "not a mapping",
			files: map[string]string{"bundles/p.yaml": "- a\n- b\n"},
			want:  ValidationError{File: "bundles/p.yaml", Line: 1, Rule: -1},
		},
		{
			name:  "agent naming an unknown bundle",
			files: map[string]string{"bundles/catalog.yaml": good, "agents/a.yaml": "id: a\ntool:\n  bundles:\n    - catalog\n    - nope\n"},
			want:  ValidationError{File: "agents/a.yaml", Line: 5, Agent: "a", Rule: -1, Field: "tool.bundles[1]"},
			text:  `unknown bundle "nope"`,
		},
		{
			name:  "agent without ID",
			files: map[string]string{"agents/a.yaml": "tool:\n  bundles: [x]\n"},
			want:  ValidationError{File: "agents/a.yaml", Line: 1, Rule: -1, Field: "id"},
		},
		{
			name:  "duplicate agent ID",
			files: map[string]string{"agents/a.yaml": "id: a\n", "agents/b.yaml": "id: a\n"},
			want:  ValidationError{File: "agents/b.yaml", Line: 1, Agent: "a", Rule: -1, Field: "id"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range c.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			ws, err := LoadWorkspace(fsys)
			if err == nil {
				t.Fatalf("LoadWorkspace succeeded: %+v", ws)
			}
			if !errors.Is(err, ErrInvalidWorkspace) {
				t.Errorf("error %v does not match ErrInvalidWorkspace", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T %v holds no ValidationError", err, err)
			}
			got := ValidationError{File: ve.File, Line: ve.Line, Bundle: ve.Bundle, Agent: ve.Agent, Rule: ve.Rule, Field: ve.Field}
			if got != c.want {
				t.Errorf("error fields = %+v, want %+v (error: %v)", got, c.want, err)
			}
			if !strings.Contains(err.Error(), c.text) {
				t.Errorf("error %q does not contain %q", err, c.text)
			}
		})
	}
}

func TestNewWorkspaceReportsEveryProblem(t *testing.T) {
	_, err := NewWorkspace([]Bundle{
		{ID: "a", Match: []Rule{{Name: "x", Tier: "sometimes"}, {Name: "y:"}}},
		{ID: "", Match: []Rule{{Name: "z"}}},
	}, nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`bundle "a": match[0]: tier: unknown tier "sometimes"`, `match[1]: name: pattern "y:"`, "invalid bundle ID"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

// TestMisspeltAgentSectionsAreRefused: an agent file may hold keys of its
// own beside Toolbus's, but a misspelling of the tool section or of its
// bundles and items would silently leave the agent without its own rules,
// exclusions included: it is refused, naming the key.
func TestMisspeltAgentSectionsAreRefused(t *testing.T) {
	for name, doc := range map[string]string{
		"tool.itemz":  "id: analyst\ntool:\n  itemz:\n    - name: \"vault:*\"\n",
		"tool.bundle": "id: analyst\ntool:\n  bundle: [text]\n",
		"tools":       "id: analyst\ntools:\n  items:\n    - name: \"vault:*\"\n",
	} {
		_, err := LoadWorkspace(fstest.MapFS{"agents/analyst.yaml": {Data: []byte(doc)}})
		if err == nil || !strings.Contains(err.Error(), name+":") {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
	// Keys of the agent's own definition are let be.
	if _, err := LoadWorkspace(fstest.MapFS{"agents/analyst.yaml": {Data: []byte("id: analyst\nmodel: some-model\ntool:\n  callExposure: full\n  items:\n    - name: \"vault:*\"\n")}}); err != nil {
		t.Fatal(err)
	}
}
