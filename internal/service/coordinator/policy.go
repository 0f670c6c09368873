package coordinator

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// explainPolicy is policy.explain: which rule of the policy in force
// decides a call, and why. It is for operators: the explanation shows the
// policy's rules, conditions and other agents' patterns, which an agent
// learns only by making the call (docs/security.md).
func (v *toolView) explainPolicy(ctx context.Context, r *messages.PolicyExplainRequest) (*messages.PolicyExplainReply, error) {
	if err := requireOperator(ctx, messages.EndpointPolicyExplain); err != nil {
		return nil, err
	}
	name, err := messages.ParseToolName(r.Tool)
	if err != nil {
		return nil, err
	}
	t, ok, err := v.catalog.Get(ctx, name)
	if err != nil {
		return nil, unavailable(err, "read tool %s", name)
	}
	if !ok {
		return nil, messages.Errorf(messages.CodeToolNotFound, "no tool %s in the catalog", name)
	}
	p := v.policy.Load()
	e := p.Explain(policy.Request{Tool: t.Definition, Agent: r.Agent, Arguments: r.Arguments})
	reply := &messages.PolicyExplainReply{
		Tool: name.String(), Agent: r.Agent,
		Effect: string(e.Decision.Effect), Reason: e.Decision.Reason,
		Rules:   []messages.PolicyRuleStep{},
		Default: string(p.Default()), Visible: e.Visible,
		PolicyVersion: p.Version(), Policy: p.Source(),
	}
	for _, s := range e.Steps {
		step := messages.PolicyRuleStep{Index: s.Entry, ID: s.RuleID, Preset: s.Preset, Line: s.Line, Effect: string(s.Effect), Matched: s.Matched, Why: s.Why}
		reply.Rules = append(reply.Rules, step)
		if s.Matched {
			reply.Rule = &step
		}
	}
	return reply, nil
}

// policyLint warns of the rules of the policy in force that match no tool
// of the catalog, or that earlier rules shadow (policy.Policy.Check): a
// typo in a tool's name fails open, the call it was written for running
// as the later rules and the default say. It checks when the policy is
// loaded or reloaded and whenever the catalog's tools change, and logs
// each problem once, when it appears, and again at every reload; a
// problem that a change of the catalog resolves is logged as resolved.
type policyLint struct {
	policy  *atomic.Pointer[policy.Policy]
	catalog *catalog.View
	// settle is how long the catalog is left to settle after it changed,
	// or after the start, before the check: a starting worker registers
	// its tools one by one.
	settle time.Duration
	log    *slog.Logger
	// reloaded is signalled when the policy file was reloaded.
	reloaded chan struct{}
	// toldEmpty is set once the lint said that the catalog had no tools.
	toldEmpty bool
}

func newPolicyLint(p *atomic.Pointer[policy.Policy], view *catalog.View, settle time.Duration, log *slog.Logger) *policyLint {
	return &policyLint{policy: p, catalog: view, settle: settle, log: log, reloaded: make(chan struct{}, 1)}
}

// policyReloaded tells the lint that the policy changed, so that it checks
// at once and logs every problem again.
func (l *policyLint) policyReloaded() {
	select {
	case l.reloaded <- struct{}{}:
	default:
	}
}

// start runs the checks until stop.
func (l *policyLint) start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (l *policyLint) run(ctx context.Context) {
	var (
		checked  *policy.Policy
		tools    uint64
		reported = map[string]policy.Problem{}
		waiting  = true // for the first check, after the start
	)
	timer := time.NewTimer(l.settle)
	defer timer.Stop()
	for {
		changed := l.catalog.Changed()
		select {
		case <-ctx.Done():
			return
		case <-l.reloaded:
			reported = map[string]policy.Problem{}
			checked = nil
		case <-timer.C:
			waiting = false
		case <-changed:
			if !waiting && l.catalog.ToolsVersion() != tools {
				waiting = true
				timer.Reset(l.settle)
			}
			continue
		}
		if waiting {
			continue
		}
		p := l.policy.Load()
		if p == checked && l.catalog.ToolsVersion() == tools {
			continue
		}
		checked, tools = p, l.catalog.ToolsVersion()
		reported = l.check(p, reported)
	}
}

// check logs the policy's problems against the catalog that were not in
// reported, and those of reported that are resolved; it returns the
// problems now.
func (l *policyLint) check(p *policy.Policy, reported map[string]policy.Problem) map[string]policy.Problem {
	if p == nil {
		return map[string]policy.Problem{}
	}
	var defs []messages.ToolDefinition
	others := 0
	for _, t := range l.catalog.Tools() {
		defs = append(defs, t.Definition) // a rule may name the built-in tools too
		if t.Definition.Namespace != BuiltinNamespace {
			others++
		}
	}
	if others == 0 {
		if !l.toldEmpty {
			l.toldEmpty = true
			l.log.Info("the catalog has no tools yet: the policy's rules are checked against it as tools register", "policy", p.Source())
		}
		return reported
	}
	now := map[string]policy.Problem{}
	for _, pr := range p.Check(defs) {
		key := pr.Error()
		now[key] = pr
		if _, ok := reported[key]; ok {
			continue
		}
		msg := "policy rule matches no tool of the catalog; it holds no call until such a tool registers"
		if pr.Kind == policy.Shadowed {
			msg = "policy rule never decides a call: earlier rules decide every tool it matches"
		}
		l.log.Warn(msg, "problem", key)
	}
	for key := range reported {
		if _, ok := now[key]; !ok {
			l.log.Info("policy problem resolved by a change of the catalog", "problem", key)
		}
	}
	return now
}
