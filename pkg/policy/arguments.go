package policy

import (
	"bytes"
	"fmt"

	"github.com/toolbus/toolbus/internal/support/jsonparse"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Arguments are a call's arguments read once, for everything that looks
// at them: a schema's validation, the digest, the policy's rules and the
// redaction for approvals and the audit log. Read-only once parsed; safe
// for concurrent use.
type Arguments struct {
	// sent is the value as sent: nil for null, {} for empty arguments.
	sent any
	// compact is the text without insignificant white space.
	compact messages.JSON
	// blank is set for arguments of white space alone: {} to everything
	// but Compact, which refuses them as encoding/json's Compact does.
	blank bool
	// read is set by ParseArguments; the zero Arguments holds none.
	read bool
}

// ParseArguments reads a call's arguments once. Empty arguments are {};
// anything else must be one JSON value (an object, for a tool), nested at
// most messages.MaxJSONDepth levels. Arguments of white space alone are
// read as {}; their Compact form is an error. The result is a value, for
// the caller to keep where it keeps the rest of the call.
func ParseArguments(arguments messages.JSON) (Arguments, error) {
	if len(arguments) == 0 {
		return Arguments{sent: map[string]any{}, compact: messages.JSON(emptyObject), read: true}, nil
	}
	if len(bytes.TrimSpace(arguments)) == 0 {
		return Arguments{sent: map[string]any{}, blank: true, read: true}, nil
	}
	v, compact, err := jsonparse.ParseCompact(arguments)
	if err != nil {
		return Arguments{}, fmt.Errorf("invalid JSON: %w", err)
	}
	return Arguments{sent: v, compact: compact, read: true}, nil
}

// Sent is the value as sent: nil for null, {} for empty arguments. It is
// what a schema validates. Numbers are json.Number, objects map[string]any.
func (a *Arguments) Sent() any { return a.sent }

// Value is the value as [ArgumentsDigest] and the policy's rules read it:
// null is {} too.
func (a *Arguments) Value() any {
	if a.sent == nil {
		return map[string]any{}
	}
	return a.sent
}

// Compact is the arguments' text without insignificant white space, {}
// for empty arguments; an error for arguments of white space alone.
func (a *Arguments) Compact() (messages.JSON, error) {
	if a.blank {
		return nil, fmt.Errorf("unexpected end of JSON input")
	}
	return a.compact, nil
}

// Digest is [ArgumentsDigest] of the arguments.
func (a *Arguments) Digest() string { return DigestOf(a.Value()) }
