package schemacost

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// arrayProperties is an object of n properties, each an array of the object.
func arrayProperties(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"p%d":{"type":"array","items":{"$ref":"#"}}`, i)
	}
	b.WriteString(`}}`)
	return b.String()
}

// union is a oneOf of n object types told apart by a "kind" constant,
// each with a nested object and an array of strings.
func union(n int) string {
	var b strings.Builder
	b.WriteString(`{"oneOf":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"type":"object","required":["kind"],"properties":{"kind":{"const":"k%d"},"spec":{"type":"object","properties":{"name":{"type":"string"},"size":{"type":"integer"}}},"tags":{"type":"array","items":{"type":"string"}}}}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name, schema string
		costly       bool
	}{
		{"empty", ``, false},
		{"plain object", `{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer","minimum":0}},"required":["path"]}`, false},
		{"any JSON value", `{"anyOf":[{"type":["string","number","boolean","null"]},{"type":"array","items":{"$ref":"#"}},{"type":"object","additionalProperties":{"$ref":"#"}}]}`, false},
		{"tree with named and other children", `{"type":"object","properties":{"left":{"$ref":"#"},"right":{"$ref":"#"}},"additionalProperties":{"$ref":"#"}}`, false},
		{"tuple tree", `{"type":"array","prefixItems":[{"$ref":"#"},{"$ref":"#"}],"items":{"type":"string"}}`, false},
		{"pattern tree", `{"type":"object","patternProperties":{"^x":{"$ref":"#"}},"additionalProperties":{"type":"string"}}`, false},
		{"draft-07 definitions", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/definitions/node"}}}}},"$ref":"#/definitions/node"}`, false},
		{"union of 60 object types", union(60), false},
		{"recursive union", `{"$defs":{"e":{"oneOf":[{"type":"object","properties":{"and":{"type":"array","items":{"$ref":"#/$defs/e"}}}},{"type":"object","properties":{"not":{"$ref":"#/$defs/e"}}},{"type":"string"}]}},"$ref":"#/$defs/e"}`, false},
		{"200 properties, each an array of the object", arrayProperties(200), false},
		{"filter", `{"$defs":{"f":{"type":"object","properties":{"and":{"type":"array","items":{"$ref":"#/$defs/f"}},"or":{"type":"array","items":{"$ref":"#/$defs/f"}},"not":{"$ref":"#/$defs/f"},"field":{"type":"string"}}}},"$ref":"#/$defs/f"}`, false},
		{"branches recurse under different keys", `{"anyOf":[{"properties":{"a":{"$ref":"#"}}},{"properties":{"b":{"$ref":"#"}}},{"items":{"$ref":"#"}}]}`, false},
		{"three branches recurse under one key", `{"oneOf":[{"required":["x"],"properties":{"child":{"$ref":"#"}}},{"required":["y"],"properties":{"child":{"$ref":"#"}}},{"required":["z"],"properties":{"child":{"$ref":"#"}}}]}`, true},
		{"dynamic reference to the root's anchor", `{"$dynamicAnchor":"node","type":"object","properties":{"kids":{"type":"array","items":{"$dynamicRef":"#node"}}},"$defs":{"other":{"$id":"urn:x:other","$dynamicAnchor":"node","type":"string"},"more":{"$id":"urn:x:more","$dynamicAnchor":"node","type":"number"}}}`, false},
		{"dynamic reference to an anchor of another resource", `{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"urn:x:other"}}},"$defs":{"other":{"$id":"urn:x:other","$dynamicAnchor":"node","type":"object","properties":{"k":{"$dynamicRef":"#node"}}}}}`, true},
		{"twin oneOf", `{"$defs":{"n":{"oneOf":[{"$ref":"#/$defs/t"},{"$ref":"#/$defs/t"}]},"t":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`, true},
		{"twin anyOf under items", `{"$defs":{"n":{"anyOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"}]},"a":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}`, true},
		{"allOf of itself twice", `{"type":"object","properties":{"c":{"allOf":[{"$ref":"#"},{"$ref":"#"}]}}}`, true},
		{"property and pattern both recurse", `{"type":"object","properties":{"c":{"$ref":"#"}},"patternProperties":{"c":{"$ref":"#"}}}`, true},
		{"in-place cycle", `{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckJSON([]byte(tc.schema))
			if tc.costly != errors.Is(err, ErrTooCostly) {
				t.Fatalf("CheckJSON = %v; costly %v", err, tc.costly)
			}
			if !tc.costly && err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The twin-oneOf schema is refused at the depth where it passes the
// budget, and the error says where it branches.
func TestCostErrorNamesDepthAndLocation(t *testing.T) {
	err := CheckJSON([]byte(`{"$defs":{"n":{"oneOf":[{"$ref":"#/$defs/t"},{"$ref":"#/$defs/t"}]},"t":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`))
	var ce *CostError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v", err)
	}
	if ce.Depth < 5 || ce.Depth > 12 || ce.Evaluations <= MaxEvaluationsPerValue {
		t.Errorf("refused at depth %d with %v evaluations", ce.Depth, ce.Evaluations)
	}
	if !strings.Contains(ce.Location, "#/$defs/") {
		t.Errorf("location %q is not in the schema's $defs", ce.Location)
	}
	t.Log(err)
}

func TestCompileRefusesExternalReferences(t *testing.T) {
	if _, err := Compile([]byte(`{"$ref":"https://example.com/schema.json"}`)); err == nil {
		t.Fatal("an external reference compiled")
	}
}

// A schema too large to bound in a tenth of a second is refused, quickly.
func TestCheckRefusesSchemasTooLargeToBound(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"type":"object","patternProperties":{`)
	for i := range 300 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"^p%d":{"type":"array","items":{"$ref":"#"}}`, i)
	}
	b.WriteString(`},"properties":{`)
	for i := range 3000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":{"type":"string"}`, i)
	}
	b.WriteString(`}}`)
	start := time.Now()
	err := CheckJSON([]byte(b.String()))
	var ce *CostError
	if !errors.As(err, &ce) || ce.Depth != -1 || !strings.Contains(ce.Reason, "too large") {
		t.Fatalf("err = %v", err)
	}
	t.Logf("refused in %v: %v", time.Since(start), err)
}
