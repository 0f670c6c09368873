package toolschema_test

import (
	"fmt"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

func Example() {
	defs := []messages.ToolDefinition{{
		Name:        "weather-forecast",
		Namespace:   "weather",
		Method:      "forecast",
		Description: "Forecast for a city.",
		InputSchema: messages.JSON(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["C","F"],"default":"C"},"days":{"type":["integer","null"]}},"required":["city"]}`),
	}}
	opts := toolschema.Options{Think: true}
	for _, format := range []string{toolschema.Anthropic, toolschema.Gemini} {
		tools, err := toolschema.Format(defs, format, opts)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %s\n", format, tools[0])
	}

	// The model's call carries the thought; strip it before validating and executing.
	args, thought, err := toolschema.StripThought(&defs[0], opts, messages.JSON(`{"thought":"The user asked about Oslo.","city":"Oslo"}`))
	fmt.Println(string(args), "|", thought, "|", err)
	// Output:
	// anthropic: {"name":"weather-forecast","description":"Forecast for a city.","input_schema":{"type":"object","properties":{"thought":{"type":"string","description":"Step-by-step reasoning for this call."},"city":{"type":"string"},"unit":{"enum":["C","F"],"default":"C"},"days":{"type":["integer","null"]}},"required":["thought","city"]}}
	// gemini: {"name":"weather-forecast","description":"Forecast for a city.","parameters":{"type":"OBJECT","properties":{"thought":{"type":"STRING","description":"Step-by-step reasoning for this call."},"city":{"type":"STRING"},"unit":{"type":"STRING","enum":["C","F"]},"days":{"type":"INTEGER","nullable":true}},"propertyOrdering":["thought","city","unit","days"],"required":["thought","city"]}}
	// {"city":"Oslo"} | The user asked about Oslo. | <nil>
}
