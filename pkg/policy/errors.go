package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalid is matched by every error that [Parse], [Load] and [New] return
// for a policy that is wrong (as opposed to a reader that failed).
var ErrInvalid = errors.New("invalid policy")

// ValidationError says what is wrong with one part of a policy. Parse, Load
// and New report every problem they find, joined with [errors.Join]; use
// [errors.As] to get the first one.
type ValidationError struct {
	// Source is the name given to Parse or Load; empty for New.
	Source string
	// Line is the line in the source, 0 when unknown.
	Line int
	// Rule is the index of the entry in the rules list as written (a preset
	// reference counts as one entry), or -1 for a problem of the whole policy.
	Rule int
	// RuleID is the entry's id, when it has one.
	RuleID string
	// Field is the path of the offending field within the rule or the file,
	// as it is spelled in YAML: "effect", "tags.any[1]", "arguments[0].regex".
	Field   string
	Message string
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
	} else {
		b.WriteString("policy")
	}
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Rule >= 0 {
		fmt.Fprintf(&b, "rules[%d]", e.Rule)
		if e.RuleID != "" {
			fmt.Fprintf(&b, " (id %q)", e.RuleID)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }
