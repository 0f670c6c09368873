package messages

import "time"

// Discovery learns from use: when an agent searches in a turn and then
// calls a tool the search returned, the coordinator records the query's
// normalised terms as evidence for the tool, and the indexer folds the
// evidence into the tool's learned field. These endpoints are for
// operators.
const (
	// EndpointLearningStatus says whether learning is on, how much
	// evidence there is, and, for a tool, what it learned.
	EndpointLearningStatus = "learning.status"
	// EndpointLearningEnable and EndpointLearningDisable switch learning
	// on and off for the whole installation: off, nothing is recorded and
	// discovery ranks without learned fields; what was recorded is kept.
	EndpointLearningEnable  = "learning.enable"
	EndpointLearningDisable = "learning.disable"
	// EndpointLearningReset deletes the evidence for one tool, or all of it.
	EndpointLearningReset = "learning.reset"
)

// LearningStatusRequest asks for the state of learning (learning.status),
// and what was learned of one tool when Tool names one.
type LearningStatusRequest struct {
	Tool string `json:"tool,omitempty"`
}

// LearningStatus is the state of learning.
type LearningStatus struct {
	// Enabled is the installation's switch.
	Enabled bool `json:"enabled"`
	// Recording is false when the coordinator that answered records no
	// evidence whatever the switch says (started with learning off).
	Recording bool `json:"recording"`
	// Reason, By and ChangedAt say who switched learning last, when and why.
	Reason    string    `json:"reason,omitempty"`
	By        string    `json:"by,omitempty"`
	ChangedAt time.Time `json:"changed_at,omitzero"`
	// Tools is how many tools have evidence; Records how many records of
	// evidence there are, one per agent and tool.
	Tools   int `json:"tools"`
	Records int `json:"records"`
	// RetentionMS is how long the answering coordinator keeps an agent's
	// evidence for a tool after it last changed; TurnWindowMS how long it
	// keeps a turn's searches after the last one.
	RetentionMS  int64 `json:"retention_ms"`
	TurnWindowMS int64 `json:"turn_window_ms"`
	// Tool is what was learned of the tool the request named.
	Tool *ToolLearning `json:"tool,omitempty"`
}

// ToolLearning is what the evidence says of one tool.
type ToolLearning struct {
	Tool string `json:"tool"`
	// Agents is how many agents' evidence there is; Users how many users
	// of the identities file made it (0 without identities).
	Agents int `json:"agents"`
	Users  int `json:"users"`
	// Turns is the turns of evidence, faded with age, summed over agents.
	Turns float64 `json:"turns"`
	// LastAt is when the evidence last changed.
	LastAt time.Time `json:"last_at,omitzero"`
	// Learned is the tool's learned field as the indexer folds the
	// evidence: normalised terms, each with its count. Empty while
	// learning is off for the indexer, which then indexes none.
	Learned []LearnedTerm `json:"learned"`
}

// LearnedTerm is one term of a learned field.
type LearnedTerm struct {
	Term  string `json:"term"`
	Count int    `json:"count"`
}

// LearningSwitchRequest switches learning on (learning.enable) or off
// (learning.disable, which requires a reason).
type LearningSwitchRequest struct {
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// LearningResetRequest deletes evidence (learning.reset): the evidence for
// Tool, or with All all of it. Exactly one of them is set.
type LearningResetRequest struct {
	Tool string `json:"tool,omitempty"`
	All  bool   `json:"all,omitempty"`
	By   string `json:"by,omitempty"`
}

// LearningResetReply says how many records of evidence were deleted.
type LearningResetReply struct {
	Deleted int `json:"deleted"`
}

// Validate checks the tool's name.
func (r *LearningStatusRequest) Validate() error {
	if r.Tool == "" {
		return nil
	}
	_, err := ParseToolName(r.Tool)
	return err
}

// Validate checks the reason and who switches.
func (r *LearningSwitchRequest) Validate() error {
	return firstError(optionalLabel("by", r.By), validateText("reason", r.Reason, MaxReasonLength))
}

// Validate checks that the request names a tool or all, not both.
func (r *LearningResetRequest) Validate() error {
	if (r.Tool == "") == !r.All {
		return Errorf(CodeBadRequest, "name either a tool or all")
	}
	if r.Tool != "" {
		if _, err := ParseToolName(r.Tool); err != nil {
			return err
		}
	}
	return optionalLabel("by", r.By)
}
