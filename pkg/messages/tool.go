package messages

import (
	"fmt"
	"time"
)

// ToolDefinition is what the catalog knows of one tool. The catalog stores
// it as JSON under ToolKey; the coordinator serves it in either encoding.
type ToolDefinition struct {
	// Name is the canonical "namespace-method" name that models see.
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Method    string `json:"method"`
	// OriginalName is the name the source uses (an MCP tool name, an
	// OpenAPI operationId) when it differs from Method.
	OriginalName string `json:"original_name,omitempty"`
	Title        string `json:"title,omitempty"`
	Description  string `json:"description"`
	// InputSchema is the JSON Schema (an object schema) of the arguments.
	InputSchema  JSON         `json:"input_schema"`
	OutputSchema JSON         `json:"output_schema,omitempty"`
	Metadata     ToolMetadata `json:"metadata"`
	Source       ToolSource   `json:"source"`
	// Delivery is how often a call of the tool may run: DeliveryAtLeastOnce
	// or DeliveryAtMostOnce. A worker always fills it in, with
	// DefaultDelivery when the tool chose none; read it with
	// EffectiveDelivery, which applies that default to a definition
	// written without it.
	Delivery Delivery `json:"delivery,omitempty"`
}

// Delivery is a tool's delivery guarantee: what a call may do when the
// worker running it stops before reporting its result.
type Delivery string

const (
	// DeliveryAtLeastOnce runs the call again on another delivery, within
	// the namespace's attempts: the tool may run more than once.
	DeliveryAtLeastOnce Delivery = "at_least_once"
	// DeliveryAtMostOnce never runs the call twice: a delivery that finds
	// an earlier attempt started and no result ends the call failed with
	// ResultOutcomeUnknown.
	DeliveryAtMostOnce Delivery = "at_most_once"
)

// Valid reports whether d is one of the two guarantees.
func (d Delivery) Valid() bool { return d == DeliveryAtLeastOnce || d == DeliveryAtMostOnce }

// ParseDelivery reads a delivery guarantee by its wire name.
func ParseDelivery(s string) (Delivery, error) {
	if d := Delivery(s); d.Valid() {
		return d, nil
	}
	return "", fmt.Errorf("unknown delivery %q: use at_least_once or at_most_once", s)
}

// DefaultDelivery is the guarantee of a tool that does not choose one:
// at most once for a tool tagged TagDestructive (a run repeated by a
// redelivery could destroy twice), at least once otherwise.
func DefaultDelivery(m *ToolMetadata) Delivery {
	if m.HasTag(TagDestructive) {
		return DeliveryAtMostOnce
	}
	return DeliveryAtLeastOnce
}

// EffectiveDelivery is the tool's guarantee: Delivery, or the default for
// its tags when Delivery is empty.
func (d *ToolDefinition) EffectiveDelivery() Delivery {
	if d.Delivery != "" {
		return d.Delivery
	}
	return DefaultDelivery(&d.Metadata)
}

// ToolName returns the tool's canonical identity.
func (d *ToolDefinition) ToolName() ToolName {
	return ToolName{Namespace: d.Namespace, Method: d.Method}
}

// Built-in tags. Policy rules and discovery filters match them like custom tags.
const (
	TagReadOnly    = "read_only"
	TagDestructive = "destructive"
	TagNetwork     = "network"
	TagFileSystem  = "file_system"
	TagSlow        = "slow"
	TagPrivileged  = "privileged"
)

// ToolMetadata holds execution hints and classification.
//
//msgpack:generate
type ToolMetadata struct {
	Tags []string `json:"tags,omitempty"`
	// TimeoutMS bounds one call of the tool; a caller may ask for less, never more.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// MaxResultSize is the size in bytes of result content beyond which the
	// model-facing result is truncated; the whole result is kept aside.
	MaxResultSize int `json:"max_result_size,omitempty"`
	// SearchHint is extra words that help discovery find the tool.
	SearchHint string `json:"search_hint,omitempty"`
	// ConcurrencySafe says that calls may run in parallel with other calls of the same turn.
	ConcurrencySafe bool `json:"concurrency_safe,omitempty"`
	// ThinkAugment overrides the caller's choice of adding a "thought" parameter to this tool's schema.
	ThinkAugment *bool `json:"think_augment,omitempty"`
	// Extra is free-form metadata for applications.
	Extra map[string]string `json:"extra,omitempty"`
}

// HasTag reports whether the tool carries the tag.
func (m *ToolMetadata) HasTag(tag string) bool {
	for _, t := range m.Tags {
		if t == tag {
			return true
		}
	}
	return false
}

// Source kinds.
const (
	SourceGo      = "go"
	SourceMCP     = "mcp"
	SourceOpenAPI = "openapi"
	SourceBuiltin = "builtin"
)

// ToolSource says where a tool comes from.
//
//msgpack:generate
type ToolSource struct {
	// Kind is one of SourceGo, SourceMCP, SourceOpenAPI, SourceBuiltin.
	Kind string `json:"kind"`
	// Name identifies the MCP server or OpenAPI service within the namespace.
	Name string `json:"name,omitempty"`
}

// ToolEntry is a tool as the catalog lists it: its definition and whether it can be called now.
//
//msgpack:generate pointer
type ToolEntry struct {
	ToolDefinition
	// Available is true when a live worker serves the tool's namespace and,
	// for a tool of a source (an MCP server), can reach that source now.
	Available bool `json:"available"`
	// Unavailable says why a tool that is not Available cannot run now.
	Unavailable string `json:"unavailable,omitempty"`
	// Disabled is true when an operator disabled the tool or its namespace; Reason says why.
	Disabled bool   `json:"disabled,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Exposure is set in a model view: how the agent's rules expose the tool.
	Exposure *ToolExposure `json:"exposure,omitempty"`
}

// DisabledState is the catalog value under "disabled.<namespace>" or
// "disabled.<namespace>.<method>": an operator switched the namespace or the tool off.
type DisabledState struct {
	Reason string    `json:"reason"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
}

// ToolExposure is what an agent's exposure rules say of a tool.
//
//msgpack:generate
type ToolExposure struct {
	// Tier is critical, base or onDemand; empty for a tool that no rule
	// admitted but discovery, activation or a caller choice made visible.
	Tier          string   `json:"tier,omitempty"`
	AlwaysInclude bool     `json:"always_include,omitempty"`
	Bundles       []string `json:"bundles,omitempty"`
	// Approval is the approval mode the rules ask for: none, queue or prompt.
	Approval string `json:"approval,omitempty"`
	// Async is true when the rules ask for the tool to run asynchronously.
	Async bool `json:"async,omitempty"`
}
