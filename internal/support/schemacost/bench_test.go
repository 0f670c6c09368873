package schemacost

import "testing"

// BenchmarkCheck measures the bound of a union of 60 object types and of
// the filter schema, as a worker computes it once per tool it serves.
func BenchmarkCheck(b *testing.B) {
	for name, schema := range map[string]string{
		"union60": union(60),
		"filter":  `{"$defs":{"f":{"type":"object","properties":{"and":{"type":"array","items":{"$ref":"#/$defs/f"}},"or":{"type":"array","items":{"$ref":"#/$defs/f"}},"not":{"$ref":"#/$defs/f"},"field":{"type":"string"}}}},"$ref":"#/$defs/f"}`,
		"twin":    `{"$defs":{"n":{"oneOf":[{"$ref":"#/$defs/t"},{"$ref":"#/$defs/t"}]},"t":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`,
	} {
		sch, err := Compile([]byte(schema))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Check(sch)
			}
		})
	}
}
