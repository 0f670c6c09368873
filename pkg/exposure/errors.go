package exposure

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidWorkspace is matched by every *ValidationError.
var ErrInvalidWorkspace = errors.New("invalid exposure workspace")

// ValidationError is one problem of a bundle or agent definition, located
// as precisely as the input allows.
type ValidationError struct {
	// File is the path of the file within the workspace; empty for
	// definitions that did not come from a file.
	File string
	// Line is the 1-based line of the problem in File; 0 when unknown.
	Line int
	// Bundle or Agent is the ID of the definition at fault (empty when the
	// ID itself could not be read).
	Bundle string
	Agent  string
	// Rule is the index of the rule at fault in the bundle's match or the
	// agent's tool.items; -1 when the problem is not in a rule.
	Rule int
	// Field names the offending field, e.g. "tier" or "iconURI".
	Field string
	// Reason says what is wrong.
	Reason string
	// Err is the underlying error, e.g. from the YAML parser.
	Err error
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	switch {
	case e.Bundle != "":
		fmt.Fprintf(&b, "bundle %q: ", e.Bundle)
	case e.Agent != "":
		fmt.Fprintf(&b, "agent %q: ", e.Agent)
	}
	if e.Rule >= 0 {
		list := "match"
		if e.Agent != "" && e.Bundle == "" {
			list = "tool.items"
		}
		fmt.Fprintf(&b, "%s[%d]: ", list, e.Rule)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *ValidationError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrInvalidWorkspace) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidWorkspace }
