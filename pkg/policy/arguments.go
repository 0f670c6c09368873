package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

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

// InexactNumber returns a number of the arguments (as a JSON pointer and
// its text; which one, of several, is not fixed) that a 64-bit float cannot carry to the tool as
// written: the call's work item holds an argument that is not a 64-bit
// integer as a float, so a number with more digits than a float holds
// reaches the tool rounded, while the policy compares it as written. ""
// when every number arrives as written: integers of 64 bits, and numbers
// such as 0.1 or 1.0 that read back as the same value.
func (a *Arguments) InexactNumber() (pointer, number string) {
	return inexactNumber(a.sent, "")
}

func inexactNumber(v any, at string) (string, string) {
	switch v := v.(type) {
	case json.Number:
		if !carriedExactly(string(v)) {
			return at, string(v)
		}
	case map[string]any:
		for k, e := range v {
			if p, n := inexactNumber(e, at+"/"+pointerEscaper.Replace(k)); n != "" {
				return p, n
			}
		}
	case []any:
		for i, e := range v {
			if p, n := inexactNumber(e, at+"/"+strconv.Itoa(i)); n != "" {
				return p, n
			}
		}
	}
	return "", ""
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// carriedExactly reports whether the JSON number text reaches a tool with
// its value: as a 64-bit integer, or as a float whose shortest decimal form
// is the same number.
func carriedExactly(text string) bool {
	if !strings.ContainsAny(text, ".eE") {
		if _, err := strconv.ParseInt(text, 10, 64); err == nil {
			return true
		}
		if _, err := strconv.ParseUint(text, 10, 64); err == nil {
			return true
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return false // out of a float's range
	}
	shortest := strconv.FormatFloat(f, 'g', -1, 64)
	if shortest == text {
		return true // the common case, without exact arithmetic
	}
	written, ok := new(big.Rat).SetString(text)
	if !ok {
		return false
	}
	carried, _ := new(big.Rat).SetString(shortest)
	return carried != nil && written.Cmp(carried) == 0
}
