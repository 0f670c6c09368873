package toolschema

import (
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// benchTools returns 50 tools with schemas of the size MCP servers publish:
// a handful of parameters, enums, nested objects, arrays and a shared
// definition.
func benchTools() []messages.ToolDefinition {
	defs := make([]messages.ToolDefinition, 50)
	for i := range defs {
		defs[i] = messages.ToolDefinition{
			Name:        fmt.Sprintf("ns%d-tool%02d", i%5, i),
			Namespace:   fmt.Sprintf("ns%d", i%5),
			Method:      fmt.Sprintf("tool%02d", i),
			Description: "Searches the index for documents that match a query and returns the best matches with their scores.",
			InputSchema: messages.JSON(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{` +
				`"query":{"type":"string","description":"What to look for.","minLength":1},` +
				`"limit":{"type":"integer","minimum":1,"maximum":100,"default":10},` +
				`"mode":{"type":"string","enum":["fast","thorough","exact"]},` +
				`"since":{"type":["string","null"],"format":"date-time"},` +
				`"filters":{"type":"array","items":{"$ref":"#/$defs/Filter"}},` +
				`"options":{"type":"object","properties":{"highlight":{"type":"boolean"},"lang":{"type":"string"}},"additionalProperties":false}` +
				`},"required":["query"],"additionalProperties":false,` +
				`"$defs":{"Filter":{"type":"object","properties":{"field":{"type":"string"},"op":{"const":"eq"},"value":{"anyOf":[{"type":"string"},{"type":"number"}]}},"required":["field","value"]}}}`),
		}
	}
	return defs
}

func BenchmarkFormat50(b *testing.B) {
	defs := benchTools()
	for _, format := range Formats() {
		b.Run(format, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Format(defs, format, Options{Think: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkStripThought(b *testing.B) {
	def := &benchTools()[0]
	args := messages.JSON(`{"thought":"The user wants recent documents about NATS.","query":"nats jetstream","limit":5,"filters":[{"field":"lang","value":"en"}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := StripThought(def, Options{Think: true}, args); err != nil {
			b.Fatal(err)
		}
	}
}
