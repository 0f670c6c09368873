// Package usage is discovery's memory of use: the coordinator records,
// in the usage bucket, what agents searched for in each turn and which
// tool of the results they then called (Recorder); the indexer follows the
// bucket and folds each tool's evidence into its learned field
// (Follower); operators switch learning off, on, and forget a tool's
// evidence or all of it (Store). The rule that weighs and bounds evidence
// is pkg/search's (UsageRecord, FoldUsage), so that what is measured
// (internal/dev/searcheval) is what runs.
//
// # The usage bucket
//
// The bucket "<prefix>_usage" (resources.EnsureUsageBucket) holds:
//
//   - "settings": the learning switch (Settings), in JSON; no key means
//     learning is on. It never expires.
//   - "turns.<turn token>": a turn's searches (TurnRecord): each search's
//     usage terms (search.UsageTerms: normalised, without digits) and the
//     tools of the page it returned, the agent token of the turn, and the
//     tools the turn's calls already counted for. It expires
//     Config.TurnWindow after the turn's last search.
//   - "tools.<tool>.<agent token>": one agent's evidence for one tool
//     (search.UsageRecord). It expires Config.Retention after it last
//     changed.
//
// Tokens are 32 hexadecimal digits of a SHA-256 of a name (Token): keys
// name no agent, user or turn. A token is a pseudonym, not a secret: who
// knows an agent's name can compute its token, which is how an operator
// finds an agent's evidence. No query, argument or result is stored.
package usage

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// Keys and filters of the usage bucket.
const (
	// SettingsKey holds the learning switch.
	SettingsKey = "settings"
	// ToolsFilter matches every evidence key.
	ToolsFilter = toolsPrefix + ">"

	turnsPrefix = "turns."
	toolsPrefix = "tools."
)

// Token returns the opaque token that usage keys and records use for a
// name of some kind ("agent", "user", "turn").
func Token(kind, name string) string {
	sum := sha256.Sum256([]byte("toolbus usage\x00" + kind + "\x00" + name))
	return hex.EncodeToString(sum[:16])
}

// TurnKey is the key of a turn's searches.
func TurnKey(turn string) string { return turnsPrefix + Token("turn", turn) }

// EvidenceKey is the key of one agent's evidence for one tool.
func EvidenceKey(tool messages.ToolName, agent string) string {
	return toolsPrefix + tool.String() + "." + Token("agent", agent)
}

// ToolFilter matches the keys of every agent's evidence for one tool.
func ToolFilter(tool messages.ToolName) string { return toolsPrefix + tool.String() + ".*" }

// ParseEvidenceKey returns the tool an evidence key is about.
func ParseEvidenceKey(key string) (messages.ToolName, bool) {
	rest, ok := strings.CutPrefix(key, toolsPrefix)
	if !ok {
		return messages.ToolName{}, false
	}
	tool, token, ok := strings.Cut(rest, ".")
	if !ok || len(token) != 32 {
		return messages.ToolName{}, false
	}
	name, err := messages.ParseToolName(tool)
	if err != nil || name.String() != tool {
		return messages.ToolName{}, false
	}
	return name, true
}

// Settings is the learning switch, under SettingsKey.
type Settings struct {
	// Disabled stops the recording of evidence and its use: the indexer
	// then indexes no learned field. Evidence already recorded is kept,
	// until it expires or is reset.
	Disabled bool      `json:"disabled"`
	Reason   string    `json:"reason,omitempty"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at"`
}

// TurnRecord is what the usage bucket keeps of a turn, under TurnKey.
type TurnRecord struct {
	// Agent is the token of the agent whose turn it is: only its calls
	// count as evidence.
	Agent string `json:"agent"`
	// Searches are the turn's searches, oldest first, at most
	// MaxTurnSearches.
	Searches []search.TurnSearch `json:"searches"`
	// Counted lists the tools whose evidence the turn already recorded:
	// a turn counts once for a tool, however often it calls it.
	Counted []string `json:"counted,omitempty"`
}

// Bounds of a TurnRecord.
const (
	// MaxTurnSearches is how many of a turn's searches are kept: the latest.
	MaxTurnSearches = 16
	// MaxPageTools is how many tools of a search's page are kept: the first.
	MaxPageTools = 50
)
