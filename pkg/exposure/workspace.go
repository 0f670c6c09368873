package exposure

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Tier says when an admitted tool's schema is shown to the model.
type Tier string

const (
	// TierCritical: shown on every model iteration, including empty intake
	// choices and clarification turns.
	TierCritical Tier = "critical"
	// TierBase: shown from the start; intake narrowing may hide it. An
	// omitted tier means base.
	TierBase Tier = "base"
	// TierOnDemand: admitted and discoverable, but shown only once an exact
	// intake selection, caller choice, discovery page or activation names it.
	TierOnDemand Tier = "onDemand"
)

func (t Tier) valid() bool {
	return t == "" || t == TierCritical || t == TierBase || t == TierOnDemand
}

// ApprovalMode says whether a call of the tool waits for a human.
type ApprovalMode string

const (
	// ApprovalNone runs calls without asking anyone.
	ApprovalNone ApprovalMode = "none"
	// ApprovalQueue parks the call until someone decides it out of band.
	ApprovalQueue ApprovalMode = "queue"
	// ApprovalPrompt asks the user in the conversation, with Title and Message.
	ApprovalPrompt ApprovalMode = "prompt"
)

// Approval is a rule's approval setting for the tools it matches.
type Approval struct {
	Mode    ApprovalMode `yaml:"mode" json:"mode"`
	Title   string       `yaml:"title,omitempty" json:"title,omitempty"`
	Message string       `yaml:"message,omitempty" json:"message,omitempty"`
}

// Async is a rule's setting for running the tools it matches in the
// background: the model gets a call ID at once and the result later.
type Async struct {
	Enabled bool `yaml:"enabled" json:"enabled"`
	// Notify asks for the result to be pushed into the agent's turn when the
	// call ends, so the model need not poll.
	Notify bool `yaml:"notify,omitempty" json:"notify,omitempty"`
	// PollIntervalMS is the interval suggested to the model between status
	// checks of a running call. Defaults to the coordinator's choice.
	PollIntervalMS int64 `yaml:"pollIntervalMs,omitempty" json:"pollIntervalMs,omitempty"`
}

// Rule is one match rule of a bundle or of an agent's tool.items.
type Rule struct {
	// Name is a pattern (see Pattern) of the tools the rule admits.
	Name string `yaml:"name" json:"name"`
	// Exclude removes tools from this rule only; a later rule may admit them.
	Exclude       []string  `yaml:"exclude,omitempty" json:"exclude,omitempty"`
	Tier          Tier      `yaml:"tier,omitempty" json:"tier,omitempty"`
	AlwaysInclude bool      `yaml:"alwaysInclude,omitempty" json:"alwaysInclude,omitempty"`
	Approval      *Approval `yaml:"approval,omitempty" json:"approval,omitempty"`
	Async         *Async    `yaml:"async,omitempty" json:"async,omitempty"`
}

// Bundle groups match rules into a unit that agents reference by ID and
// that intake may select.
type Bundle struct {
	ID          string `yaml:"id" json:"id"`
	Title       string `yaml:"title,omitempty" json:"title,omitempty"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// IconRef names a built-in icon; UIs map it to an image.
	IconRef string `yaml:"iconRef,omitempty" json:"iconRef,omitempty"`
	// IconURI is a workspace-local image, "workspace://path".
	IconURI string `yaml:"iconURI,omitempty" json:"iconURI,omitempty"`
	// Priority orders bundles: Workspace.Bundles lists higher ones first, and
	// an agent that names no bundles applies them lowest first, so that the
	// approval and async settings of a higher bundle win.
	Priority int    `yaml:"priority,omitempty" json:"priority,omitempty"`
	Match    []Rule `yaml:"match,omitempty" json:"match,omitempty"`
}

// Agent is an agent's exposure configuration.
type Agent struct {
	ID   string     `yaml:"id" json:"id"`
	Tool AgentTools `yaml:"tool" json:"tool"`
}

// AgentTools lists the bundles an agent uses, in the order they apply, and
// its own rules, which apply after every bundle. An agent that names neither
// gets every bundle of the workspace.
type AgentTools struct {
	Bundles []string `yaml:"bundles,omitempty" json:"bundles,omitempty"`
	Items   []Rule   `yaml:"items,omitempty" json:"items,omitempty"`
}

// Workspace is a validated, compiled set of bundles and agents. It is
// immutable; reload by building a new one and handing it to
// Resolver.SetWorkspace.
type Workspace struct {
	bundles []*compiledBundle // Priority descending, then ID
	byID    map[string]*compiledBundle
	agents  map[string]*compiledAgent
}

type compiledBundle struct {
	bundle Bundle
	rules  []compiledRule
}

type compiledAgent struct {
	agent Agent
	items []compiledRule
}

type compiledRule struct {
	rule    *Rule
	bundle  string // empty for an agent's own items
	name    Pattern
	exclude []Pattern
}

// source locates definitions read from a file, for error messages.
type source struct {
	file      string
	line      int
	ruleLines []int
	// refLines holds the lines of an agent's tool.bundles entries.
	refLines []int
}

func (s source) ruleLine(i int) int {
	if i >= 0 && i < len(s.ruleLines) {
		return s.ruleLines[i]
	}
	return s.line
}

// NewWorkspace validates and compiles bundles and agents. Every problem is
// reported, each as a *ValidationError, joined into one error.
func NewWorkspace(bundles []Bundle, agents []Agent) (*Workspace, error) {
	bs := make([]sourced[Bundle], len(bundles))
	for i := range bundles {
		bs[i] = sourced[Bundle]{v: bundles[i]}
	}
	as := make([]sourced[Agent], len(agents))
	for i := range agents {
		as[i] = sourced[Agent]{v: agents[i]}
	}
	return newWorkspace(bs, as)
}

type sourced[T any] struct {
	v   T
	src source
}

func newWorkspace(bundles []sourced[Bundle], agents []sourced[Agent]) (*Workspace, error) {
	w := &Workspace{byID: make(map[string]*compiledBundle), agents: make(map[string]*compiledAgent)}
	var errs []error
	for _, sb := range bundles {
		cb, bundleErrs := compileBundle(sb.v, sb.src)
		errs = append(errs, bundleErrs...)
		if cb == nil {
			continue
		}
		if _, dup := w.byID[cb.bundle.ID]; dup {
			errs = append(errs, &ValidationError{File: sb.src.file, Line: sb.src.line, Bundle: cb.bundle.ID, Rule: -1, Field: "id",
				Reason: "duplicate bundle ID; another bundle already uses it"})
			continue
		}
		w.byID[cb.bundle.ID] = cb
		w.bundles = append(w.bundles, cb)
	}
	for _, sa := range agents {
		ca, agentErrs := w.compileAgent(sa.v, sa.src)
		errs = append(errs, agentErrs...)
		if ca == nil {
			continue
		}
		if _, dup := w.agents[ca.agent.ID]; dup {
			errs = append(errs, &ValidationError{File: sa.src.file, Line: sa.src.line, Agent: ca.agent.ID, Rule: -1, Field: "id",
				Reason: "duplicate agent ID; another agent already uses it"})
			continue
		}
		w.agents[ca.agent.ID] = ca
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(w.bundles, func(i, j int) bool {
		a, b := &w.bundles[i].bundle, &w.bundles[j].bundle
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.ID < b.ID
	})
	return w, nil
}

func compileBundle(b Bundle, src source) (*compiledBundle, []error) {
	var errs []error
	fail := func(rule int, field, reason string) {
		line := src.line
		if rule >= 0 {
			line = src.ruleLine(rule)
		}
		errs = append(errs, &ValidationError{File: src.file, Line: line, Bundle: b.ID, Rule: rule, Field: field, Reason: reason})
	}
	if err := messages.ValidateID("bundle ID", b.ID); err != nil {
		fail(-1, "id", err.Error())
	}
	if b.IconURI != "" {
		if reason := checkIconURI(b.IconURI); reason != "" {
			fail(-1, "iconURI", reason)
		}
	}
	if len(b.Match) == 0 {
		fail(-1, "match", "is empty; a bundle needs at least one rule")
	}
	b.Match = append([]Rule(nil), b.Match...)
	cb := &compiledBundle{bundle: b}
	for i := range cb.bundle.Match {
		cr, reasons := compileRule(&cb.bundle.Match[i])
		for _, r := range reasons {
			fail(i, r[0], r[1])
		}
		cr.bundle = b.ID
		cb.rules = append(cb.rules, cr)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cb, nil
}

func (w *Workspace) compileAgent(a Agent, src source) (*compiledAgent, []error) {
	var errs []error
	fail := func(rule, line int, field, reason string) {
		errs = append(errs, &ValidationError{File: src.file, Line: line, Agent: a.ID, Rule: rule, Field: field, Reason: reason})
	}
	if err := messages.ValidateID("agent ID", a.ID); err != nil {
		fail(-1, src.line, "id", err.Error())
	}
	for i, id := range a.Tool.Bundles {
		line := src.line
		if i < len(src.refLines) {
			line = src.refLines[i]
		}
		// A workspace without bundles derives one per namespace from the
		// catalog at admission time, so references cannot be checked here.
		if len(w.byID) > 0 {
			if _, ok := w.byID[id]; !ok {
				fail(-1, line, fmt.Sprintf("tool.bundles[%d]", i), fmt.Sprintf("unknown bundle %q", id))
			}
		}
	}
	a.Tool.Bundles = append([]string(nil), a.Tool.Bundles...)
	a.Tool.Items = append([]Rule(nil), a.Tool.Items...)
	ca := &compiledAgent{agent: a}
	for i := range ca.agent.Tool.Items {
		cr, reasons := compileRule(&ca.agent.Tool.Items[i])
		for _, r := range reasons {
			fail(i, src.ruleLine(i), r[0], r[1])
		}
		ca.items = append(ca.items, cr)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return ca, nil
}

// compileRule returns the compiled rule and the (field, reason) pairs of
// its problems.
func compileRule(r *Rule) (compiledRule, [][2]string) {
	var reasons [][2]string
	cr := compiledRule{rule: r}
	if strings.TrimSpace(r.Name) == "" {
		reasons = append(reasons, [2]string{"name", "is empty; a rule must name the tools it matches"})
	} else if p, err := ParsePattern(r.Name); err != nil {
		reasons = append(reasons, [2]string{"name", err.Error()})
	} else {
		cr.name = p
	}
	for i, ex := range r.Exclude {
		p, err := ParsePattern(ex)
		if err != nil {
			reasons = append(reasons, [2]string{fmt.Sprintf("exclude[%d]", i), err.Error()})
			continue
		}
		cr.exclude = append(cr.exclude, p)
	}
	if !r.Tier.valid() {
		reasons = append(reasons, [2]string{"tier", fmt.Sprintf("unknown tier %q; want %s, %s or %s (omitted means %s)",
			r.Tier, TierCritical, TierBase, TierOnDemand, TierBase)})
	}
	if a := r.Approval; a != nil {
		switch a.Mode {
		case ApprovalNone, ApprovalQueue, ApprovalPrompt:
		default:
			reasons = append(reasons, [2]string{"approval.mode", fmt.Sprintf("unknown mode %q; want %s, %s or %s",
				a.Mode, ApprovalNone, ApprovalQueue, ApprovalPrompt)})
		}
	}
	if a := r.Async; a != nil && a.PollIntervalMS < 0 {
		reasons = append(reasons, [2]string{"async.pollIntervalMs", fmt.Sprintf("is %d; want 0 or more", a.PollIntervalMS)})
	}
	return cr, reasons
}

func checkIconURI(uri string) string {
	const scheme = "workspace://"
	if !strings.HasPrefix(uri, scheme) {
		return fmt.Sprintf("%q must start with %q", uri, scheme)
	}
	path := uri[len(scheme):]
	if path == "" || strings.HasPrefix(path, "/") || strings.ContainsAny(path, "\\?#") {
		return fmt.Sprintf("%q must name a relative path inside the workspace", uri)
	}
	for _, seg := range strings.Split(path, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Sprintf("%q must not hold empty, '.' or '..' path segments", uri)
		}
	}
	return ""
}

// Bundles returns the workspace's bundles, higher Priority first, then by ID.
func (w *Workspace) Bundles() []Bundle {
	if w == nil {
		return nil
	}
	out := make([]Bundle, len(w.bundles))
	for i, cb := range w.bundles {
		out[i] = cb.bundle
	}
	return out
}

// Bundle returns the bundle with the ID.
func (w *Workspace) Bundle(id string) (Bundle, bool) {
	if w == nil {
		return Bundle{}, false
	}
	cb, ok := w.byID[id]
	if !ok {
		return Bundle{}, false
	}
	return cb.bundle, true
}

// Agent returns the agent with the ID. An agent that the workspace does not
// define resolves as one that names no bundles: it gets all of them.
func (w *Workspace) Agent(id string) (Agent, bool) {
	if w == nil {
		return Agent{}, false
	}
	ca, ok := w.agents[id]
	if !ok {
		return Agent{}, false
	}
	return ca.agent, true
}

// DeriveBundles makes one bundle per namespace of defs, ID and title the
// namespace, matching every tool of it; sorted by ID. It stands in for the
// bundles of a workspace that defines none.
func DeriveBundles(defs []messages.ToolDefinition) []Bundle {
	seen := make(map[string]bool)
	var out []Bundle
	for i := range defs {
		ns := defs[i].Namespace
		if seen[ns] || messages.ValidateNamespace(ns) != nil {
			continue
		}
		seen[ns] = true
		out = append(out, Bundle{ID: ns, Title: ns, Match: []Rule{{Name: ns}}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
