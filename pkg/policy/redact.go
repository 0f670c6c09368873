package policy

import (
	"bytes"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Redacted replaces sensitive values in the output of [Redact].
const Redacted = "[redacted]"

// secretWords are the fragments that make a property name look like a
// secret, once the name is lowercased and stripped of everything but
// letters and digits ("API-Key", "api_key" and "apiKey" all become
// "apikey"). A name that merely contains one counts, so "max_tokens" is
// redacted too: an audit log is better off missing a harmless value than
// holding a credential.
var secretWords = []string{
	"password", "passwd", "passphrase", "secret", "token", "apikey", "accesskey",
	"privatekey", "authorization", "credential", "cookie", "session",
}

// maxSchemaVisits bounds the work of following $ref, allOf, anyOf and oneOf
// in one call of Redact; past it every remaining value counts as sensitive.
const maxSchemaVisits = 10000

// Redact returns a copy of a call's arguments for the audit log with the
// value of every sensitive property replaced by the string [Redacted]:
// properties whose schema (within the tool's input schema) says
// "writeOnly": true, "format": "password" or "x-sensitive": true, and
// properties whose name, lowercased and stripped of everything but letters
// and digits, contains password, passwd, passphrase, secret, token, apikey,
// accesskey, privatekey, authorization, credential, cookie or session, at
// any depth of nested objects and arrays. The schema is followed through properties,
// patternProperties, additionalProperties, items, prefixItems,
// additionalItems, allOf, anyOf, oneOf, if/then/else and local $refs; a
// property is sensitive when any branch marks it so.
//
// The output is canonical JSON (see [ArgumentsDigest]), so equal arguments
// give equal output. Empty arguments give empty output; arguments that are
// not valid JSON are replaced whole by the JSON string "[redacted]". A schema
// that is not valid JSON is ignored: only names count then.
func Redact(schema, arguments messages.JSON) messages.JSON {
	return CompileRedaction(schema).RedactJSON(arguments)
}

// Redaction is a tool's input schema read for [Redact] once, to redact
// many calls of the tool: its regular expressions compiled too. It is
// read-only, safe for concurrent use.
type Redaction struct {
	root     any
	patterns map[string]*regexp.Regexp
}

// CompileRedaction reads an input schema for [Redaction.Redact]. A schema
// that is not valid JSON is ignored, as Redact ignores it: only names
// count then.
func CompileRedaction(schema messages.JSON) *Redaction {
	c := &Redaction{}
	if len(schema) > 0 {
		if s, err := decodeJSON(schema); err == nil {
			c.root = s
			c.patterns = map[string]*regexp.Regexp{}
			compilePatterns(s, c.patterns)
		}
	}
	return c
}

// compilePatterns compiles the keys of every patternProperties object in
// the schema; a key that is no regular expression is kept as nil.
func compilePatterns(s any, out map[string]*regexp.Regexp) {
	switch x := s.(type) {
	case map[string]any:
		if pp, ok := x["patternProperties"].(map[string]any); ok {
			for pattern := range pp {
				if _, done := out[pattern]; !done {
					re, err := regexp.Compile(pattern)
					if err != nil {
						re = nil
					}
					out[pattern] = re
				}
			}
		}
		for _, v := range x {
			compilePatterns(v, out)
		}
	case []any:
		for _, v := range x {
			compilePatterns(v, out)
		}
	}
}

// RedactJSON is [Redact] with the schema compiled.
func (c *Redaction) RedactJSON(arguments messages.JSON) messages.JSON {
	if len(bytes.TrimSpace(arguments)) == 0 {
		return nil
	}
	args, err := decodeJSON(arguments)
	if err != nil {
		return messages.JSON(appendString(nil, Redacted))
	}
	return c.redact(args)
}

// Redact is [Redact] of arguments already read: what Redact returns for
// their Compact form (nothing for empty arguments, or white space alone,
// which has none).
func (c *Redaction) Redact(arguments *Arguments) messages.JSON {
	if arguments.blank {
		return nil
	}
	return c.redact(arguments.sent)
}

func (c *Redaction) redact(args any) messages.JSON {
	r := redactor{root: c.root, compiled: c.patterns, budget: maxSchemaVisits}
	return messages.JSON(appendCanonical(nil, r.value(args, r.expand(r.root, nil, 0))))
}

type redactor struct {
	root   any
	budget int
	// compiled are the schema's patterns, compiled with it; patterns
	// those compiled for this call, which the schema did not hold.
	compiled map[string]*regexp.Regexp
	patterns map[string]*regexp.Regexp
}

// maxSchemaDepth bounds chains of $ref and combinators.
const maxSchemaDepth = 64

// expand appends s and every schema that applies with it to the same value
// (through $ref, allOf, anyOf, oneOf, then and else) to out.
func (r *redactor) expand(s any, out []map[string]any, depth int) []map[string]any {
	m, ok := s.(map[string]any)
	if !ok || depth > maxSchemaDepth {
		return out
	}
	if r.budget--; r.budget < 0 {
		return out
	}
	out = append(out, m)
	if ref, ok := m["$ref"].(string); ok {
		out = r.expand(r.resolve(ref), out, depth+1)
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := m[k].([]any); ok {
			for _, sub := range list {
				out = r.expand(sub, out, depth+1)
			}
		}
	}
	out = r.expand(m["then"], out, depth+1)
	return r.expand(m["else"], out, depth+1)
}

// resolve follows a $ref within the schema itself ("#/$defs/Secret");
// references to other documents resolve to nothing.
func (r *redactor) resolve(ref string) any {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil
	}
	tokens, err := parsePointer(frag)
	if err != nil {
		return nil
	}
	v := r.root
	for _, t := range tokens {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[t]
	}
	return v
}

func (r *redactor) sensitive(schemas []map[string]any) bool {
	if r.budget < 0 {
		return true
	}
	for _, m := range schemas {
		if m["writeOnly"] == true || m["x-sensitive"] == true || m["format"] == "password" {
			return true
		}
	}
	return false
}

func (r *redactor) value(v any, schemas []map[string]any) any {
	if r.sensitive(schemas) {
		return Redacted
	}
	switch x := v.(type) {
	case map[string]any:
		// Sorted, so that a schema too complex for the budget runs out at
		// the same property every time.
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if secretName(k) {
				out[k] = Redacted
				continue
			}
			out[k] = r.value(x[k], r.propertySchemas(schemas, k))
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, child := range x {
			out[i] = r.value(child, r.itemSchemas(schemas, i))
		}
		return out
	}
	return v
}

func (r *redactor) propertySchemas(schemas []map[string]any, key string) []map[string]any {
	var out []map[string]any
	for _, m := range schemas {
		matched := false
		if props, ok := m["properties"].(map[string]any); ok {
			if s, ok := props[key]; ok {
				out = r.expand(s, out, 0)
				matched = true
			}
		}
		if pp, ok := m["patternProperties"].(map[string]any); ok {
			for _, pattern := range slices.Sorted(maps.Keys(pp)) {
				if re := r.regexp(pattern); re != nil && re.MatchString(key) {
					out = r.expand(pp[pattern], out, 0)
					matched = true
				}
			}
		}
		if !matched {
			out = r.expand(m["additionalProperties"], out, 0)
		}
	}
	return out
}

func (r *redactor) itemSchemas(schemas []map[string]any, i int) []map[string]any {
	var out []map[string]any
	for _, m := range schemas {
		if prefix, ok := m["prefixItems"].([]any); ok {
			if i < len(prefix) {
				out = r.expand(prefix[i], out, 0)
			} else {
				out = r.expand(m["items"], out, 0)
			}
			continue
		}
		switch items := m["items"].(type) {
		case []any: // draft 4 to 2019-09 tuples
			if i < len(items) {
				out = r.expand(items[i], out, 0)
			} else {
				out = r.expand(m["additionalItems"], out, 0)
			}
		default:
			out = r.expand(items, out, 0)
		}
	}
	return out
}

func (r *redactor) regexp(pattern string) *regexp.Regexp {
	if re, ok := r.compiled[pattern]; ok {
		return re
	}
	if re, ok := r.patterns[pattern]; ok {
		return re
	}
	if r.patterns == nil {
		r.patterns = map[string]*regexp.Regexp{}
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		re = nil
	}
	r.patterns[pattern] = re
	return re
}

// secretName reports whether a property name looks like it holds a secret.
func secretName(name string) bool {
	var buf [64]byte
	folded := buf[:0]
	for _, c := range strings.ToLower(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			folded = append(folded, byte(c))
		}
	}
	for _, w := range secretWords {
		if bytes.Contains(folded, []byte(w)) {
			return true
		}
	}
	return false
}
