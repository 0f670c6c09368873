package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// exitPolicyProblems: policy check found a problem in the policy.
const exitPolicyProblems = 1

// runPolicy is toolbus policy check|explain.
func runPolicy(ctx context.Context, g globals, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "check":
			return runPolicyCheck(ctx, g, args[1:])
		case "explain":
			return runPolicyExplain(ctx, g, args[1:])
		}
	}
	return runHelpOf("policy", args)
}

// policyProblem is one problem of a policy file, as policy check prints
// it with --json.
type policyProblem struct {
	// Kind is invalid (the file does not load), unmatched or shadowed.
	Kind   string `json:"kind"`
	Line   int    `json:"line,omitempty"`
	Rule   *int   `json:"rule,omitempty"`
	ID     string `json:"id,omitempty"`
	Preset string `json:"preset,omitempty"`
	Field  string `json:"field,omitempty"`
	// Message is the problem as the text output prints it, with the
	// file, line, rule and field.
	Message string `json:"message"`
}

// policyCheck is what policy check prints with --json.
type policyCheck struct {
	Policy   string          `json:"policy"`
	Version  string          `json:"version,omitempty"`
	Rules    int             `json:"rules"`
	Tools    int             `json:"tools"`
	Catalog  string          `json:"catalog"`
	Problems []policyProblem `json:"problems"`
}

// runPolicyCheck is toolbus policy check FILE: the file is loaded as the
// coordinator loads it, and its rules are held against the catalog of a
// running Toolbus (or of --catalog FILE, offline). It exits 1 when it
// finds a problem.
func runPolicyCheck(ctx context.Context, g globals, args []string) error {
	fs := newFlags("policy check")
	catalogFile := fs.String("catalog", "", "check against the tools of this `FILE` (what toolbus --json tools prints) instead of a running Toolbus's catalog")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) != 1 {
		return usageError("usage: toolbus policy check FILE [--catalog FILE]")
	}
	file := pos[0]
	data, err := os.ReadFile(file)
	if err != nil {
		return usageError(fmt.Sprintf("read policy: %v", err))
	}
	out := policyCheck{Policy: file, Problems: []policyProblem{}}
	p, err := policy.Parse(data, filepath.Base(file))
	if err != nil {
		var invalid *policy.ValidationError
		if !errors.As(err, &invalid) {
			return err
		}
		out.Problems = invalidProblems(err)
		return reportPolicyCheck(g, out)
	}
	out.Version, out.Rules = p.Version(), len(p.Rules())

	var tools []messages.ToolDefinition
	if *catalogFile != "" {
		out.Catalog = *catalogFile
		if tools, err = readCatalogFile(*catalogFile); err != nil {
			return usageError(err.Error())
		}
	} else {
		out.Catalog = g.server
		g.agent = "" // the whole catalog, not an agent's view of it
		nc, c, err := g.connect()
		if err != nil {
			return fmt.Errorf("%w; to check offline, pass --catalog FILE, a file that `toolbus --json tools` wrote", err)
		}
		defer nc.Close()
		reply, err := c.ListTools(ctx, messages.ListToolsRequest{})
		if err != nil {
			return err
		}
		if tools, err = wholeCatalog(reply); err != nil {
			return err
		}
	}
	out.Tools = len(tools)
	for _, pr := range p.Check(tools) {
		out.Problems = append(out.Problems, policyProblem{Kind: string(pr.Kind), Line: pr.Line, Rule: &pr.Entry, ID: pr.RuleID, Preset: pr.Preset, Field: pr.Field, Message: pr.Error()})
	}
	return reportPolicyCheck(g, out)
}

// invalidProblems lists the problems of a file that does not load, one
// for each error Parse joined.
func invalidProblems(err error) []policyProblem {
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []policyProblem
	for _, e := range errs {
		pr := policyProblem{Kind: "invalid", Message: e.Error()}
		var v *policy.ValidationError
		if errors.As(e, &v) {
			pr.Line, pr.ID, pr.Field = v.Line, v.RuleID, v.Field
			if v.Rule >= 0 {
				rule := v.Rule
				pr.Rule = &rule
			}
		}
		out = append(out, pr)
	}
	return out
}

// reportPolicyCheck prints the check's outcome, and exits 1 when it found
// a problem.
func reportPolicyCheck(g globals, out policyCheck) error {
	if g.json {
		if err := printJSON(out); err != nil {
			return err
		}
	} else {
		writePolicyCheck(os.Stdout, out)
	}
	if len(out.Problems) > 0 {
		return exitError(exitPolicyProblems)
	}
	return nil
}

func writePolicyCheck(w io.Writer, out policyCheck) {
	for _, pr := range out.Problems {
		fmt.Fprintln(w, pr.Message)
	}
	switch {
	case len(out.Problems) > 0 && out.Version == "":
		fmt.Fprintf(w, "%s: %d %s; the policy does not load\n", out.Policy, len(out.Problems), plural(len(out.Problems), "problem", "problems"))
	case len(out.Problems) > 0:
		fmt.Fprintf(w, "%s: %d %s, checked against %d tools of %s\n", out.Policy, len(out.Problems), plural(len(out.Problems), "problem", "problems"), out.Tools, out.Catalog)
	default:
		fmt.Fprintf(w, "%s: no problem found: %d rules checked against %d tools of %s\n", out.Policy, out.Rules, out.Tools, out.Catalog)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// readCatalogFile reads the tools of a file: the reply of tools.list as
// `toolbus --json tools` prints it, or a list of tool definitions.
func readCatalogFile(file string) ([]messages.ToolDefinition, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	var tools []messages.ToolDefinition
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '[' {
		err = json.Unmarshal(trimmed, &tools)
	} else {
		var reply messages.ListToolsReply
		if err = json.Unmarshal(data, &reply); err == nil {
			tools, err = wholeCatalog(&reply)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read catalog %s: want what `toolbus --json tools` prints, or a list of tool definitions: %v", file, err)
	}
	return tools, nil
}

// wholeCatalog returns the tools of a tools.list reply, which must be the
// whole catalog: an agent's view leaves out the tools the policy hides
// from it, and would have rules naming them match nothing.
func wholeCatalog(reply *messages.ListToolsReply) ([]messages.ToolDefinition, error) {
	var tools []messages.ToolDefinition
	for _, t := range reply.Tools {
		if t.Exposure != nil {
			return nil, errors.New("tools.list answered with an agent's view of the catalog, not the whole catalog (a user of one agent gets its agent's view): connect as an operator's user, or pass --catalog FILE that `toolbus --json tools` wrote as one")
		}
		tools = append(tools, t.ToolDefinition)
	}
	return tools, nil
}

// runPolicyExplain is toolbus policy explain TOOL [JSON-ARGS]: which rule
// of the policy in force decides the call, and why. Operators only, with
// identities.
func runPolicyExplain(ctx context.Context, g globals, args []string) error {
	fs := newFlags("policy explain")
	agent := fs.String("agent", g.agent, "the agent that would call the tool")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageError("usage: toolbus policy explain TOOL [JSON-ARGS] [--agent A]")
	}
	req := messages.PolicyExplainRequest{Tool: pos[0], Agent: *agent}
	if len(pos) == 2 {
		if !json.Valid([]byte(pos[1])) {
			return usageError(fmt.Sprintf("arguments are not valid JSON: %s", pos[1]))
		}
		req.Arguments = messages.JSON(pos[1])
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	reply, err := c.Operator().ExplainPolicy(ctx, req)
	if err != nil {
		return forOperators(err)
	}
	if g.json {
		return printJSON(reply)
	}
	writePolicyExplain(os.Stdout, reply)
	return nil
}

func writePolicyExplain(w io.Writer, r *messages.PolicyExplainReply) {
	who := "an anonymous caller"
	if r.Agent != "" {
		who = "agent " + printable(r.Agent)
	}
	fmt.Fprintf(w, "%s for %s: %s\n", r.Tool, who, r.Effect)
	src := r.Policy
	if src == "" {
		src = "the policy"
	}
	switch {
	case r.Rule != nil:
		fmt.Fprintf(w, "decided by %s: %s\n", stepName(src, *r.Rule), printable(r.Reason))
	default:
		fmt.Fprintf(w, "decided by the default (%s): %s\n", r.Default, printable(r.Reason))
	}
	if len(r.Rules) > 0 {
		fmt.Fprintln(w, "rules tried:")
		for _, s := range r.Rules {
			mark := "no "
			if s.Matched {
				mark = "yes"
			}
			fmt.Fprintf(w, "  %s  %-6s %s: %s\n", mark, s.Effect, stepName(src, s), printable(s.Why))
		}
	}
	if !r.Visible {
		fmt.Fprintln(w, "the agent's models do not see the tool: the policy denies it whatever the arguments")
	}
	if r.PolicyVersion != "" {
		fmt.Fprintf(w, "policy version %s\n", r.PolicyVersion)
	}
}

// stepName names a rule as errors do: file:line: rules[i] (id or preset).
func stepName(src string, s messages.PolicyRuleStep) string {
	var b strings.Builder
	b.WriteString(src)
	if s.Line > 0 {
		fmt.Fprintf(&b, ":%d", s.Line)
	}
	fmt.Fprintf(&b, " rules[%d]", s.Index)
	switch {
	case s.Preset != "":
		fmt.Fprintf(&b, " (preset %s)", s.Preset)
	case s.ID != "":
		fmt.Fprintf(&b, " (id %q)", s.ID)
	}
	return b.String()
}
