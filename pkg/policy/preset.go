package policy

import (
	"maps"
	"slices"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Names of the built-in presets. Each stands for the rules below, with the
// preset's name as the rule's id; reference one from YAML with
// "- preset: ask_destructive" or from Go with [Preset]. They test only the
// built-in tags, so they are as good as the tags on the tools: MCP tools get
// them from their annotations (readOnlyHint, destructiveHint, openWorldHint).
//
// Since the first matching rule wins, order matters when a tool carries
// several of these tags; a sensible order is deny_privileged,
// ask_destructive, allow_read_only, ask_network, ask_file_system, then a
// default.
const (
	// PresetAllowReadOnly allows tools tagged read_only, unless they are
	// also tagged destructive or privileged (contradictory tags are not
	// trusted to mean read-only):
	//   {id: allow_read_only, tags: {any: [read_only], none: [destructive, privileged]}, effect: allow}
	PresetAllowReadOnly = "allow_read_only"
	// PresetAskDestructive asks before running tools tagged destructive:
	//   {id: ask_destructive, tags: {any: [destructive]}, effect: ask}
	PresetAskDestructive = "ask_destructive"
	// PresetDenyPrivileged denies tools tagged privileged:
	//   {id: deny_privileged, tags: {any: [privileged]}, effect: deny}
	PresetDenyPrivileged = "deny_privileged"
	// PresetAskNetwork asks before running tools tagged network:
	//   {id: ask_network, tags: {any: [network]}, effect: ask}
	PresetAskNetwork = "ask_network"
	// PresetAskFileSystem asks before running tools tagged file_system:
	//   {id: ask_file_system, tags: {any: [file_system]}, effect: ask}
	PresetAskFileSystem = "ask_file_system"
)

var presets = map[string][]Rule{
	PresetAllowReadOnly: {{
		ID:     PresetAllowReadOnly,
		Tags:   TagMatch{Any: []string{messages.TagReadOnly}, None: []string{messages.TagDestructive, messages.TagPrivileged}},
		Effect: Allow,
		Reason: "the tool only reads",
	}},
	PresetAskDestructive: {{
		ID:     PresetAskDestructive,
		Tags:   TagMatch{Any: []string{messages.TagDestructive}},
		Effect: Ask,
		Reason: "the tool is destructive and needs approval",
	}},
	PresetDenyPrivileged: {{
		ID:     PresetDenyPrivileged,
		Tags:   TagMatch{Any: []string{messages.TagPrivileged}},
		Effect: Deny,
		Reason: "the tool is privileged",
	}},
	PresetAskNetwork: {{
		ID:     PresetAskNetwork,
		Tags:   TagMatch{Any: []string{messages.TagNetwork}},
		Effect: Ask,
		Reason: "the tool reaches the network and needs approval",
	}},
	PresetAskFileSystem: {{
		ID:     PresetAskFileSystem,
		Tags:   TagMatch{Any: []string{messages.TagFileSystem}},
		Effect: Ask,
		Reason: "the tool touches the file system and needs approval",
	}},
}

// Preset returns a copy of the rules that the named preset stands for.
func Preset(name string) ([]Rule, bool) {
	rules, ok := presets[name]
	if !ok {
		return nil, false
	}
	out := make([]Rule, len(rules))
	for i, r := range rules {
		out[i] = r.clone()
	}
	return out, true
}

// Presets returns the names of the built-in presets, sorted.
func Presets() []string {
	return slices.Sorted(maps.Keys(presets))
}
