package schemacost

import (
	"testing"
	"time"
)

// FuzzCheckJSON: any bytes, as a schema, compile or not, and Check ends
// quickly without a panic.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{
		``, `{"type":"object"}`, `true`, `{"$ref":"#"}`,
		`{"$defs":{"n":{"oneOf":[{"$ref":"#/$defs/t"},{"$ref":"#/$defs/t"}]},"t":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`,
		`{"type":"array","prefixItems":[{"$ref":"#"},{"$ref":"#"}],"items":{"$ref":"#"},"contains":{"$ref":"#"}}`,
		`{"properties":{"a":{"$ref":"#"}},"patternProperties":{"^b":{"$ref":"#"}},"additionalProperties":{"$ref":"#"},"propertyNames":{"maxLength":3}}`,
		`{"$dynamicAnchor":"x","properties":{"k":{"$dynamicRef":"#x"}}}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"$ref":"#"}],"additionalItems":{"$ref":"#"},"dependencies":{"a":{"$ref":"#/definitions/d"}},"definitions":{"d":{}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		start := time.Now()
		_ = CheckJSON(schema)
		// A check that blows up takes far longer than this, which leaves a
		// busy machine (the seeds run in every go test) its slack.
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("CheckJSON took %v on %q", d, schema)
		}
	})
}
