package messages

import (
	"fmt"
	"strings"
)

// Tags of a NATS user JWT that say what the user may do in Toolbus
// (docs/security.md, "Signed identities"): ClaimTagAgent followed by an
// agent pattern lets the user act as the agents the pattern matches, and
// ClaimTagOperator makes the user an operator. The server writes the
// user's JWT in the Nats-Request-Info of every request that crosses the
// API's import, where the coordinator reads them; `toolbus agent add`
// writes them.
const (
	ClaimTagPrefix   = "toolbus:"
	ClaimTagAgent    = ClaimTagPrefix + "agent:"
	ClaimTagOperator = ClaimTagPrefix + "operator"
)

// ValidateAgentPattern checks an agent pattern of a user's claims: an
// agent's name (letters, digits, '_', '-', '=') in which '*' stands for any
// run of characters and '?' for one, with at least one character that is
// neither. NATS's subject wildcard '>' is no pattern here, and a pattern
// of wildcards alone, which would let the user act as every agent, is
// refused: an operator may act as any agent.
func ValidateAgentPattern(p string) error {
	switch {
	case strings.Contains(p, ">"):
		return &NameError{Kind: "agent pattern", Value: p, Reason: "'>' is a subject wildcard, not part of an agent's name; '*' stands for any run of characters"}
	case strings.Trim(p, "*?") == "":
		return &NameError{Kind: "agent pattern", Value: p, Reason: "would match every agent: name the agents (a prefix such as triage-*), or make the user an operator"}
	case len(p) > MaxIDLength || !onlyOf(p, "_=-*?"):
		return &NameError{Kind: "agent pattern", Value: p, Reason: fmt.Sprintf("holds letters, digits, '_', '-', '=' and the wildcards '*' and '?', at most %d characters", MaxIDLength)}
	}
	return nil
}
