package exposure

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// The seed's catalog bundle: lookup critical, details onDemand, help onDemand + alwaysInclude.
var seedRules = []Rule{
	{Name: "catalog:lookup", Tier: TierCritical},
	{Name: "catalog:details", Tier: TierOnDemand},
	{Name: "catalog:help", Tier: TierOnDemand, AlwaysInclude: true},
}

var seedCatalog = []string{"catalog-lookup", "catalog-details", "catalog-help", "ops-restart", "ops-status", "misc-Y", "misc-Z"}

// TestAcceptance holds the acceptance cases of the exposure semantics, numbered as specified.
func TestAcceptance(t *testing.T) {
	type tc struct {
		name    string
		catalog []string
		bundles []Bundle
		agents  []Agent
		agent   string
		it      Iteration
		want    []string
		check   func(t *testing.T, a *Admission, v Visible)
	}
	seedOnly := []Bundle{bundle("catalog", seedRules...)}
	seedAndOps := []Bundle{bundle("catalog", seedRules...), bundle("ops", Rule{Name: "ops"})}
	cases := []tc{
		{
			name:    "01 glob admits every method, sorted",
			catalog: []string{"resources:read", "resources:list"},
			bundles: []Bundle{bundle("r", Rule{Name: "resources:*"})},
			want:    []string{"resources-list", "resources-read"},
		},
		{
			name:    "02 exclude removes a tool from the rule",
			catalog: []string{"resources:read", "resources:list"},
			bundles: []Bundle{bundle("r", Rule{Name: "resources:*", Exclude: []string{"resources:read"}})},
			want:    []string{"resources-list"},
			check: func(t *testing.T, a *Admission, v Visible) {
				if !a.Excluded("resources:read") {
					t.Error("resources-read is not reported as excluded")
				}
			},
		},
		{
			name:    "03 overlapping rules admit each tool once",
			catalog: []string{"resources:read", "resources:list"},
			bundles: []Bundle{bundle("r", Rule{Name: "resources:*"}, Rule{Name: "resources:read"})},
			want:    []string{"resources-list", "resources-read"},
			check: func(t *testing.T, a *Admission, v Visible) {
				assertNames(t, "admitted", toolNames(a.Tools()), []string{"resources-list", "resources-read"})
			},
		},
		{
			name:    "04 patterns match tools published in another spelling",
			catalog: []string{"analyst-ResourceTree", "analyst:SaveDecision", "analyst.Other"},
			bundles: []Bundle{bundle("a", Rule{Name: "analyst:ResourceTree"}, Rule{Name: "analyst-SaveDecision"})},
			want:    []string{"analyst-ResourceTree", "analyst-SaveDecision"},
		},
		{
			name:    "05 glob with exclude in the other spelling",
			catalog: []string{"analyst-ResourceTree", "analyst:SaveDecision"},
			bundles: []Bundle{bundle("a", Rule{Name: "analyst:*", Exclude: []string{"analyst-SaveDecision"}})},
			want:    []string{"analyst-ResourceTree"},
		},
		{
			name:    "06 approval of a nested namespace rule",
			catalog: []string{"system/os:getenv", "system-other"},
			bundles: []Bundle{bundle("sys", Rule{Name: "system/os:*", Approval: &Approval{Mode: ApprovalPrompt, Title: "Read the environment?"}})},
			want:    []string{"system_os-getenv"},
			check: func(t *testing.T, a *Admission, v Visible) {
				tool := mustLookup(t, a, "system_os-getenv")
				if tool.Approval == nil || tool.Approval.Mode != ApprovalPrompt || tool.Approval.Title != "Read the environment?" {
					t.Errorf("approval = %+v, want prompt with its title", tool.Approval)
				}
			},
		},
		{
			name:    "07 async settings attach to the matched tool",
			catalog: []string{"jobs:build", "jobs:status"},
			bundles: []Bundle{bundle("jobs", Rule{Name: "jobs:status"}, Rule{Name: "jobs:build", Async: &Async{Enabled: true, Notify: true, PollIntervalMS: 2000}})},
			want:    []string{"jobs-build", "jobs-status"},
			check: func(t *testing.T, a *Admission, v Visible) {
				if got := mustLookup(t, a, "jobs-build").Async; got == nil || !got.Enabled || !got.Notify || got.PollIntervalMS != 2000 {
					t.Errorf("jobs-build async = %+v", got)
				}
				if got := mustLookup(t, a, "jobs-status").Async; got != nil {
					t.Errorf("jobs-status async = %+v, want none", got)
				}
			},
		},
		{
			name:    "08a exact method does not match a longer one",
			catalog: []string{"catalog:lookup", "catalog:lookupAll"},
			bundles: []Bundle{bundle("c", Rule{Name: "catalog:lookup"})},
			want:    []string{"catalog-lookup"},
		},
		{
			name:    "08b exact namespace does not match a longer one",
			catalog: []string{"system/exec", "system/executor:run"},
			bundles: []Bundle{bundle("s", Rule{Name: "system/exec"})},
			want:    []string{"system-exec"},
		},
		{
			name:    "08c namespace glob matches every list method",
			catalog: []string{"a:list", "b:list", "b:listAll", "c:get"},
			bundles: []Bundle{bundle("l", Rule{Name: "*:list"})},
			want:    []string{"a-list", "b-list"},
		},
		{
			name:    "08d bare namespace is not a prefix",
			catalog: []string{"catalog:lookup", "catalogue:lookup"},
			bundles: []Bundle{bundle("c", Rule{Name: "catalog"})},
			want:    []string{"catalog-lookup"},
		},
		{
			name:    "09 no tiers and no intake show every admitted tool",
			catalog: seedCatalog,
			bundles: []Bundle{bundle("c", Rule{Name: "catalog"}), bundle("o", Rule{Name: "ops"})},
			want:    []string{"catalog-details", "catalog-help", "catalog-lookup", "ops-restart", "ops-status"},
		},
		{
			name:    "10 tiers without intake",
			catalog: seedCatalog,
			bundles: seedOnly,
			want:    []string{"catalog-help", "catalog-lookup"},
			check: func(t *testing.T, a *Admission, v Visible) {
				if got := mustLookup(t, a, "catalog-details").Tier; got != TierOnDemand {
					t.Errorf("catalog-details tier = %q, want onDemand", got)
				}
				if got := mustLookup(t, a, "catalog-lookup").Tier; got != TierCritical {
					t.Errorf("catalog-lookup tier = %q, want critical", got)
				}
			},
		},
		{
			name:    "11 selecting the bundle does not promote onDemand",
			catalog: seedCatalog,
			bundles: seedOnly,
			it:      Iteration{Intake: &Intake{Bundles: []string{"catalog"}}},
			want:    []string{"catalog-help", "catalog-lookup"},
		},
		{
			name:    "12 exact intake selection promotes onDemand",
			catalog: seedCatalog,
			bundles: seedOnly,
			it:      Iteration{Intake: &Intake{Tools: []string{"catalog:details"}}},
			want:    []string{"catalog-details", "catalog-help", "catalog-lookup"},
		},
		{
			name:    "13a empty intake keeps critical and alwaysInclude only",
			catalog: seedCatalog,
			bundles: seedAndOps,
			it:      Iteration{Intake: &Intake{}},
			want:    []string{"catalog-help", "catalog-lookup"},
		},
		{
			name:    "13b clarification turn keeps critical and alwaysInclude only",
			catalog: seedCatalog,
			bundles: seedAndOps,
			it:      Iteration{Clarification: true},
			want:    []string{"catalog-help", "catalog-lookup"},
		},
		{
			name:    "13c clarification turn ignores intake selections",
			catalog: seedCatalog,
			bundles: seedAndOps,
			it:      Iteration{Clarification: true, Intake: &Intake{Tools: []string{"catalog:details", "ops:status"}, Bundles: []string{"ops"}}},
			want:    []string{"catalog-help", "catalog-lookup"},
		},
		{
			name:    "13d without intake base tools of every bundle show",
			catalog: seedCatalog,
			bundles: seedAndOps,
			want:    []string{"catalog-help", "catalog-lookup", "ops-restart", "ops-status"},
		},
		{
			name:    "14 intake narrows to one base tool",
			catalog: seedCatalog,
			bundles: seedAndOps,
			it:      Iteration{Intake: &Intake{Tools: []string{"ops/restart"}}},
			want:    []string{"catalog-help", "catalog-lookup", "ops-restart"},
		},
		{
			name:    "14b intake selecting a bundle keeps its base tools",
			catalog: seedCatalog,
			bundles: seedAndOps,
			it:      Iteration{Intake: &Intake{Bundles: []string{"ops"}}},
			want:    []string{"catalog-help", "catalog-lookup", "ops-restart", "ops-status"},
		},
		{
			name:    "15 a discovery page shows its tools, bundled or not",
			catalog: seedCatalog,
			bundles: seedOnly,
			it:      Iteration{Discovered: []string{"catalog:details", "misc:Y"}},
			want:    []string{"catalog-details", "catalog-help", "catalog-lookup", "misc-Y"},
			check: func(t *testing.T, a *Admission, v Visible) {
				for _, tool := range v.Tools {
					if tool.Name == "misc-Y" && (tool.Admitted || tool.Tier != "") {
						t.Errorf("misc-Y = %+v, want an unadmitted tool without tier", tool)
					}
				}
			},
		},
		{
			name:    "17 tier precedence",
			catalog: []string{"t:a", "t:b", "t:c"},
			bundles: []Bundle{
				bundle("one", Rule{Name: "t:a", Tier: TierBase}, Rule{Name: "t:b", Tier: TierOnDemand}, Rule{Name: "t:c"}),
				bundle("two", Rule{Name: "t:a", Tier: TierOnDemand}, Rule{Name: "t:b", Tier: TierCritical}, Rule{Name: "t:c", Tier: TierOnDemand}),
			},
			want: []string{"t-b"},
			check: func(t *testing.T, a *Admission, v Visible) {
				for name, want := range map[string]Tier{"t-a": TierOnDemand, "t-b": TierCritical, "t-c": TierOnDemand} {
					if got := mustLookup(t, a, name).Tier; got != want {
						t.Errorf("%s tier = %q, want %q", name, got, want)
					}
				}
			},
		},
		{
			name:    "18 alwaysInclude flags OR together",
			catalog: []string{"t:a"},
			bundles: []Bundle{bundle("one", Rule{Name: "t:a", Tier: TierOnDemand, AlwaysInclude: true}, Rule{Name: "t:*", Tier: TierOnDemand})},
			want:    []string{"t-a"},
			check: func(t *testing.T, a *Admission, v Visible) {
				if !mustLookup(t, a, "t-a").AlwaysInclude {
					t.Error("alwaysInclude lost")
				}
			},
		},
		{
			name:    "20 agent items behave like bundle rules",
			catalog: seedCatalog,
			agents:  []Agent{{ID: "analyst", Tool: AgentTools{Items: seedRules}}},
			agent:   "analyst",
			bundles: seedAndOps,
			want:    []string{"catalog-help", "catalog-lookup"},
			check: func(t *testing.T, a *Admission, v Visible) {
				got := a.Visible(Iteration{Intake: &Intake{Tools: []string{"catalog:details"}}})
				assertNames(t, "after exact intake", got.Names(), []string{"catalog-details", "catalog-help", "catalog-lookup"})
				got = a.Visible(Iteration{Activated: []string{"catalog-details"}})
				assertNames(t, "after activation", got.Names(), []string{"catalog-details", "catalog-help", "catalog-lookup"})
				if len(mustLookup(t, a, "catalog-lookup").Bundles) != 0 {
					t.Error("an agent item reports a bundle")
				}
			},
		},
		{
			name:    "20b agent item onDemand over a base bundle rule",
			catalog: seedCatalog,
			bundles: []Bundle{bundle("everything", Rule{Name: "catalog:*"})},
			agents:  []Agent{{ID: "analyst", Tool: AgentTools{Bundles: []string{"everything"}, Items: []Rule{{Name: "catalog:details", Tier: TierOnDemand}}}}},
			agent:   "analyst",
			want:    []string{"catalog-help", "catalog-lookup"},
		},
		{
			name:    "21 a later rule re-admits what an earlier rule excluded",
			catalog: seedCatalog,
			bundles: []Bundle{bundle("c", Rule{Name: "catalog:*", Exclude: []string{"catalog:details"}}, Rule{Name: "catalog:details"})},
			want:    []string{"catalog-details", "catalog-help", "catalog-lookup"},
			check: func(t *testing.T, a *Admission, v Visible) {
				if a.Excluded("catalog-details") {
					t.Error("a re-admitted tool is reported as excluded")
				}
			},
		},
		{
			name:    "21b an excluded tool cannot be discovered",
			catalog: seedCatalog,
			bundles: []Bundle{bundle("c", Rule{Name: "catalog:*", Exclude: []string{"catalog:details"}})},
			it:      Iteration{Intake: &Intake{}, Discovered: []string{"catalog:details", "misc-Z"}},
			want:    []string{"misc-Z"},
			check: func(t *testing.T, a *Admission, v Visible) {
				assertNames(t, "dropped", v.Dropped, []string{"catalog:details"})
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ws := mustWorkspace(t, c.bundles, c.agents...)
			a := ws.Admit(c.agent, catalogOf(1, c.catalog...))
			v := a.Visible(c.it)
			assertNames(t, "visible", v.Names(), c.want)
			if c.check != nil {
				c.check(t, a, v)
			}
		})
	}
}

// Case 16: selections saved with a turn are revalidated against the current catalog on resume.
func TestResumeRevalidatesSelections(t *testing.T) {
	ws := mustWorkspace(t, []Bundle{bundle("catalog", seedRules...)})
	r := NewResolver(ws)
	saved := Iteration{Discovered: []string{"catalog:details", "misc:Y"}}

	before := r.Resolve("analyst", catalogOf(1, seedCatalog...), saved)
	assertNames(t, "before resume", before.Names(), []string{"catalog-details", "catalog-help", "catalog-lookup", "misc-Y"})

	resumed := r.Resolve("analyst", catalogOf(2, seedCatalog...), saved)
	assertNames(t, "after resume", resumed.Names(), before.Names())
	assertNames(t, "dropped after resume", resumed.Dropped, nil)

	var without []string
	for _, n := range seedCatalog {
		if n != "misc-Y" {
			without = append(without, n)
		}
	}
	gone := r.Resolve("analyst", catalogOf(3, without...), saved)
	assertNames(t, "after misc-Y vanished", gone.Names(), []string{"catalog-details", "catalog-help", "catalog-lookup"})
	assertNames(t, "dropped", gone.Dropped, []string{"misc:Y"})
}

func TestApprovalAndAsyncLastRuleWins(t *testing.T) {
	prompt := &Approval{Mode: ApprovalPrompt}
	queue := &Approval{Mode: ApprovalQueue}
	on := &Async{Enabled: true}
	bundles := []Bundle{
		{ID: "low", Priority: 1, Match: []Rule{{Name: "t:*", Approval: prompt, Async: on}}},
		{ID: "high", Priority: 5, Match: []Rule{{Name: "t:a", Approval: queue}, {Name: "t:b"}}},
	}
	agents := []Agent{
		{ID: "reversed", Tool: AgentTools{Bundles: []string{"high", "low"}}},
		{ID: "override", Tool: AgentTools{Bundles: []string{"low"}, Items: []Rule{{Name: "t:b", Approval: &Approval{Mode: ApprovalNone}}}}},
	}
	ws := mustWorkspace(t, bundles, agents...)
	cat := catalogOf(1, "t:a", "t:b")
	cases := []struct {
		agent, tool string
		approval    ApprovalMode
		async       bool
	}{
		// Without a bundle list, higher priority applies later and wins.
		{"", "t-a", ApprovalQueue, true},
		// A later rule without settings does not clear them.
		{"", "t-b", ApprovalPrompt, true},
		{"reversed", "t-a", ApprovalPrompt, true},
		{"override", "t-b", ApprovalNone, true},
		{"override", "t-a", ApprovalPrompt, true},
	}
	for _, c := range cases {
		tool := mustLookup(t, ws.Admit(c.agent, cat), c.tool)
		if tool.Approval == nil || tool.Approval.Mode != c.approval {
			t.Errorf("agent %q, %s: approval = %+v, want %s", c.agent, c.tool, tool.Approval, c.approval)
		}
		if (tool.Async != nil && tool.Async.Enabled) != c.async {
			t.Errorf("agent %q, %s: async = %+v, want enabled=%v", c.agent, c.tool, tool.Async, c.async)
		}
	}
}

func TestAgentBundleSelection(t *testing.T) {
	bundles := []Bundle{bundle("a", Rule{Name: "a"}), bundle("b", Rule{Name: "b"})}
	agents := []Agent{
		{ID: "only-a", Tool: AgentTools{Bundles: []string{"a", "a"}}},
		{ID: "items-only", Tool: AgentTools{Items: []Rule{{Name: "c:x"}}}},
		{ID: "nothing"},
	}
	ws := mustWorkspace(t, bundles, agents...)
	cat := catalogOf(1, "a:x", "b:x", "c:x")
	for agent, want := range map[string][]string{
		"only-a":     {"a-x"},
		"items-only": {"c-x"},
		"nothing":    {"a-x", "b-x"},
		"unknown":    {"a-x", "b-x"},
	} {
		assertNames(t, agent, toolNames(ws.Admit(agent, cat).Tools()), want)
	}
	assertNames(t, "bundles of only-a", ws.Admit("only-a", cat).Bundles(), []string{"a"})
}

func TestWorkspaceWithoutBundlesDerivesThem(t *testing.T) {
	cat := catalogOf(1, "a:x", "a:y", "b:x")
	var nilWS *Workspace
	for name, ws := range map[string]*Workspace{"nil": nilWS, "empty": mustWorkspace(t, nil)} {
		a := ws.Admit("anyone", cat)
		assertNames(t, name+": visible", a.Visible(Iteration{}).Names(), []string{"a-x", "a-y", "b-x"})
		assertNames(t, name+": bundles", a.Bundles(), []string{"a", "b"})
		assertNames(t, name+": intake bundle a", a.Visible(Iteration{Intake: &Intake{Bundles: []string{"a"}}}).Names(), []string{"a-x", "a-y"})
	}
	ws := mustWorkspace(t, nil, Agent{ID: "b-user", Tool: AgentTools{Bundles: []string{"b", "gone"}}})
	assertNames(t, "agent naming a derived bundle", toolNames(ws.Admit("b-user", cat).Tools()), []string{"b-x"})
}

func TestDeriveBundles(t *testing.T) {
	defs := []messages.ToolDefinition{def("zeta:a"), def("alpha:b"), def("zeta:c"), {Namespace: "bad-ns", Method: "x"}}
	got := DeriveBundles(defs)
	want := []Bundle{
		{ID: "alpha", Title: "alpha", Match: []Rule{{Name: "alpha"}}},
		{ID: "zeta", Title: "zeta", Match: []Rule{{Name: "zeta"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DeriveBundles = %+v, want %+v", got, want)
	}
	if _, err := NewWorkspace(got, nil); err != nil {
		t.Errorf("derived bundles do not validate: %v", err)
	}
}

func TestPromotionSources(t *testing.T) {
	ws := mustWorkspace(t, []Bundle{bundle("catalog", seedRules...)})
	a := ws.Admit("", catalogOf(1, seedCatalog...))
	notMisc := func(d *messages.ToolDefinition) bool { return d.Namespace != "misc" }
	cases := []struct {
		name        string
		it          Iteration
		want, drops []string
	}{
		{"caller choice promotes onDemand", Iteration{Chosen: []string{"catalog.details"}}, []string{"catalog-details", "catalog-help", "catalog-lookup"}, nil},
		{"caller choice of an unbundled tool", Iteration{Chosen: []string{"misc-Z"}}, []string{"catalog-help", "catalog-lookup", "misc-Z"}, nil},
		{"activation of an unbundled tool", Iteration{Activated: []string{"misc/Y"}}, []string{"catalog-help", "catalog-lookup", "misc-Y"}, nil},
		{"policy hides unbundled tools", Iteration{Activated: []string{"misc-Y"}, Discoverable: notMisc}, []string{"catalog-help", "catalog-lookup"}, []string{"misc-Y"}},
		{"policy does not hide admitted tools", Iteration{Discovered: []string{"catalog-details"}, Discoverable: notMisc}, []string{"catalog-details", "catalog-help", "catalog-lookup"}, nil},
		{"intake cannot select an unadmitted tool", Iteration{Intake: &Intake{Tools: []string{"misc-Y"}}}, []string{"catalog-help", "catalog-lookup"}, []string{"misc-Y"}},
		{"unknown and unparsable names are dropped once", Iteration{Discovered: []string{"nope-x", "???", "nope-x"}}, []string{"catalog-help", "catalog-lookup"}, []string{"nope-x", "???"}},
		{"same tool from several sources appears once", Iteration{Chosen: []string{"misc-Y"}, Discovered: []string{"misc:Y"}, Activated: []string{"misc.Y", "catalog-details"}}, []string{"catalog-details", "catalog-help", "catalog-lookup", "misc-Y"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := a.Visible(c.it)
			assertNames(t, "visible", v.Names(), c.want)
			assertNames(t, "dropped", v.Dropped, c.drops)
		})
	}
}

// Exposure metadata is kept beside the catalog's definitions: resolving
// neither modifies them nor lets tier, approval or async leak into them.
func TestDefinitionsStayUntouched(t *testing.T) {
	defs := []messages.ToolDefinition{def("catalog:lookup"), def("catalog:details"), def("catalog:help"), def("misc:Y")}
	defs[0].Metadata.Tags = []string{"read_only"}
	defs[0].Metadata.Extra = map[string]string{"k": "v"}
	before, err := json.Marshal(defs)
	if err != nil {
		t.Fatal(err)
	}
	cat := NewCatalog(1, defs)
	ws := mustWorkspace(t, []Bundle{bundle("catalog", append(seedRules, Rule{Name: "catalog", Approval: &Approval{Mode: ApprovalPrompt}, Async: &Async{Enabled: true}})...)})
	v := NewResolver(ws).Resolve("", cat, Iteration{Discovered: []string{"catalog-details", "misc-Y"}})
	if len(v.Tools) != 4 {
		t.Fatalf("visible = %v", v.Names())
	}
	served, err := json.Marshal(v.Definitions())
	if err != nil {
		t.Fatal(err)
	}
	for _, word := range []string{"tier", "onDemand", "critical", "alwaysInclude", "approval", "prompt", "async"} {
		if strings.Contains(strings.ToLower(string(served)), strings.ToLower(word)) {
			t.Errorf("served definitions mention %q: %s", word, served)
		}
	}
	after, _ := json.Marshal(defs)
	if string(before) != string(after) {
		t.Errorf("input definitions changed:\n%s\n%s", before, after)
	}
	catAfter, _ := json.Marshal(cat.Definitions())
	var sorted []messages.ToolDefinition
	for _, n := range []string{"catalog-details", "catalog-help", "catalog-lookup", "misc-Y"} {
		d, _ := cat.Lookup(n)
		sorted = append(sorted, *d)
	}
	want, _ := json.Marshal(sorted)
	if string(catAfter) != string(want) {
		t.Errorf("catalog definitions changed")
	}
	for _, tool := range v.Tools {
		d, _ := cat.Lookup(tool.Name)
		if tool.Definition != d {
			t.Errorf("%s: definition is a copy, not the catalog's own", tool.Name)
		}
	}
}

func TestCatalog(t *testing.T) {
	defs := []messages.ToolDefinition{def("b:x"), def("a:y"), def("a_b:z"), def("a:x"), def("a:x"), {Namespace: "bad ns", Method: "q"}}
	defs[4].Description = "duplicate"
	c := NewCatalog(7, defs)
	if c.Version() != 7 || c.Len() != 4 {
		t.Fatalf("version %d, len %d", c.Version(), c.Len())
	}
	var names []string
	for _, d := range c.Definitions() {
		names = append(names, d.ToolName().String())
	}
	assertNames(t, "sorted", names, []string{"a-x", "a-y", "a_b-z", "b-x"})
	if d, ok := c.Lookup("a:x"); !ok || d.Description == "duplicate" {
		t.Errorf("Lookup(a:x) = %+v, %v; want the first definition", d, ok)
	}
	for _, p := range []struct {
		pattern string
		want    []string
	}{
		{"a", []string{"a-x", "a-y"}},
		{"a*", []string{"a-x", "a-y", "a_b-z"}},
		{"a/b:*", []string{"a_b-z"}},
		{"*:x", []string{"a-x", "b-x"}},
		{"*", []string{"a-x", "a-y", "a_b-z", "b-x"}},
		{"missing:*", nil},
	} {
		var got []string
		for _, d := range c.Match(MustParsePattern(p.pattern)) {
			got = append(got, d.ToolName().String())
		}
		assertNames(t, p.pattern, got, p.want)
	}
}

func TestToolInSeveralBundles(t *testing.T) {
	ws := mustWorkspace(t, []Bundle{
		{ID: "a", Priority: 3, Match: []Rule{{Name: "x:*"}, {Name: "x:shared"}}},
		{ID: "b", Priority: 2, Match: []Rule{{Name: "x:shared"}, {Name: "y"}}},
		{ID: "c", Priority: 1, Match: []Rule{{Name: "*:shared"}}},
		{ID: "d", Match: []Rule{{Name: "x:shared"}}},
	})
	a := ws.Admit("", catalogOf(1, "x:shared", "x:other", "y:shared", "y:other"))
	// Without a bundle list, bundles apply lowest priority first.
	assertNames(t, "bundles of x-shared", mustLookup(t, a, "x-shared").Bundles, []string{"d", "c", "b", "a"})
	assertNames(t, "bundles of y-shared", mustLookup(t, a, "y-shared").Bundles, []string{"c", "b"})
	assertNames(t, "bundles of x-other", mustLookup(t, a, "x-other").Bundles, []string{"a"})
	for bundle, want := range map[string][]string{
		"a": {"x-other", "x-shared"},
		"b": {"x-shared", "y-other", "y-shared"},
		"c": {"x-shared", "y-shared"},
		"d": {"x-shared"},
		"z": nil,
	} {
		got := a.Visible(Iteration{Intake: &Intake{Bundles: []string{bundle}}})
		assertNames(t, "intake selecting "+bundle, got.Names(), want)
	}
}

// Tool definitions cannot carry exposure settings: a tier in a source's
// metadata means nothing to resolution.
func TestDefinitionsCannotSetExposure(t *testing.T) {
	d := def("catalog:sneaky")
	d.Metadata.Extra = map[string]string{"tier": "critical", "alwaysInclude": "true"}
	d.Metadata.Tags = []string{"critical"}
	ws := mustWorkspace(t, []Bundle{bundle("catalog", Rule{Name: "catalog", Tier: TierOnDemand})})
	a := ws.Admit("", NewCatalog(1, []messages.ToolDefinition{d}))
	if tool := mustLookup(t, a, "catalog-sneaky"); tool.Tier != TierOnDemand || tool.AlwaysInclude {
		t.Errorf("tool = %+v", tool)
	}
	assertNames(t, "visible", a.Visible(Iteration{}).Names(), nil)
}
