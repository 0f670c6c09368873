package messages

// EndpointPolicyExplain says which rule of the policy in force decides a
// call, and why (policy.explain). It is for operators: the explanation
// shows the policy's rules.
const EndpointPolicyExplain = "policy.explain"

// PolicyExplainRequest names a call to explain: the tool (any spelling of
// its name), its arguments and the agent that would call it. Nothing is
// called, held or audited.
type PolicyExplainRequest struct {
	Tool      string `json:"tool"`
	Arguments JSON   `json:"arguments,omitempty"`
	Agent     string `json:"agent,omitempty"`
}

// Validate checks the tool's name and the agent.
func (r *PolicyExplainRequest) Validate() error {
	if r.Tool == "" {
		return Errorf(CodeBadRequest, "tool is required")
	}
	if _, err := ParseToolName(r.Tool); err != nil {
		return err
	}
	return optionalID("agent", r.Agent)
}

// PolicyExplainReply is how the policy in force decides the call.
type PolicyExplainReply struct {
	// Tool is the tool's canonical name.
	Tool  string `json:"tool"`
	Agent string `json:"agent,omitempty"`
	// Effect is allow, deny or ask; Reason what the call's caller would
	// be told.
	Effect string `json:"effect"`
	Reason string `json:"reason"`
	// Rule is the rule that decided; absent when the default did (or no
	// policy is set, or the arguments are not JSON and a rule tests them).
	Rule *PolicyRuleStep `json:"rule,omitempty"`
	// Rules are the rules tried, in order: every rule up to the one that
	// decided, or all of them when the default did.
	Rules []PolicyRuleStep `json:"rules"`
	// Default is the policy's default effect.
	Default string `json:"default"`
	// Visible says whether the agent's models see the tool at all: false
	// when the policy denies it whatever the arguments.
	Visible bool `json:"visible"`
	// PolicyVersion is the version of the policy in force; Policy its
	// file's name, when it was read from a file.
	PolicyVersion string `json:"policy_version"`
	Policy        string `json:"policy,omitempty"`
}

// PolicyRuleStep is one rule of the policy as it applied to the call.
type PolicyRuleStep struct {
	// Index is the rule's entry in the file's rules list, rules[index] (a
	// preset counts as one entry); Line its line there.
	Index  int    `json:"index"`
	ID     string `json:"id,omitempty"`
	Preset string `json:"preset,omitempty"`
	Line   int    `json:"line,omitempty"`
	Effect string `json:"effect"`
	// Matched is true for the rule that decided.
	Matched bool `json:"matched"`
	// Why says which of its conditions did not hold, or that all did.
	Why string `json:"why"`
}
