package toolschema

import (
	"bytes"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func boolPtr(b bool) *bool { return &b }

func TestThoughtProperty(t *testing.T) {
	cases := []struct{ schema, want string }{
		{``, "thought"},
		{`{"type":"object","properties":{"q":{}}}`, "thought"},
		{`{"type":"object","properties":{"thought":{}}}`, "thought_"},
		{`{"type":"object","properties":{"thought":{},"thought_":{}}}`, "thought__"},
		{`{"anyOf":[{"properties":{"x":{}}},{"$ref":"#/$defs/T"}],"$defs":{"T":{"properties":{"thought":{}}}}}`, "thought_"},
		{`{"$ref":"#/$defs/A","$defs":{"A":{"properties":{"thought":{}}}}}`, "thought_"},
		{`{"properties":{"nested":{"properties":{"thought":{}}}}}`, "thought"},
		{`not json`, "thought"},
	}
	for _, c := range cases {
		if got := ThoughtProperty(messages.JSON(c.schema)); got != c.want {
			t.Errorf("ThoughtProperty(%s) = %q, want %q", c.schema, got, c.want)
		}
	}
}

func TestThinkAugmentation(t *testing.T) {
	withThought := messages.ToolDefinition{Name: "a-x", InputSchema: messages.JSON(`{"type":"object","properties":{"thought":{"type":"integer"}},"required":["thought"]}`)}
	optedOut := messages.ToolDefinition{Name: "a-y", Metadata: messages.ToolMetadata{ThinkAugment: boolPtr(false)}}
	optedIn := messages.ToolDefinition{Name: "a-z", Metadata: messages.ToolMetadata{ThinkAugment: boolPtr(true)}}
	cases := []struct {
		def    messages.ToolDefinition
		format string
		opts   Options
		want   string
	}{
		{withThought, Anthropic, Options{Think: true}, `{"name":"a-x","input_schema":{"type":"object","properties":{"thought_":{"type":"string","description":"Step-by-step reasoning for this call."},"thought":{"type":"integer"}},"required":["thought_","thought"]}}`},
		{withThought, OpenAIChat, Options{Think: true, Strict: true}, `{"type":"function","function":{"name":"a-x","parameters":{"type":"object","properties":{"thought_":{"type":"string","description":"Step-by-step reasoning for this call."},"thought":{"type":"integer"}},"required":["thought_","thought"],"additionalProperties":false},"strict":true}}`},
		{optedOut, Anthropic, Options{Think: true}, `{"name":"a-y","input_schema":{"type":"object","properties":{}}}`},
		{optedIn, Anthropic, Options{}, `{"name":"a-z","input_schema":{"type":"object","properties":{"thought":{"type":"string","description":"Step-by-step reasoning for this call."}},"required":["thought"]}}`},
		{optedIn, Gemini, Options{}, `{"name":"a-z","description":"a-z","parameters":{"type":"OBJECT","properties":{"thought":{"type":"STRING","description":"Step-by-step reasoning for this call."}},"required":["thought"]}}`},
		{optedIn, MCP, Options{}, `{"name":"a-z","inputSchema":{"type":"object","properties":{"thought":{"type":"string","description":"Step-by-step reasoning for this call."}},"required":["thought"]}}`},
	}
	for _, c := range cases {
		got, err := Format([]messages.ToolDefinition{c.def}, c.format, c.opts)
		if err != nil {
			t.Errorf("%s %s: %v", c.def.Name, c.format, err)
			continue
		}
		if string(got[0]) != c.want {
			t.Errorf("%s %s %+v:\n got %s\nwant %s", c.def.Name, c.format, c.opts, got[0], c.want)
		}
	}
}

func TestStripThought(t *testing.T) {
	plain := &messages.ToolDefinition{Name: "a-x", InputSchema: messages.JSON(`{"type":"object","properties":{"city":{"type":"string"},"n":{"type":"number"}}}`)}
	colliding := &messages.ToolDefinition{Name: "a-y", InputSchema: messages.JSON(`{"type":"object","properties":{"thought":{"type":"string"}}}`)}
	optedOut := &messages.ToolDefinition{Name: "a-z", Metadata: messages.ToolMetadata{ThinkAugment: boolPtr(false)}}
	on, off := Options{Think: true}, Options{}
	cases := []struct {
		name     string
		def      *messages.ToolDefinition
		opts     Options
		args     string
		want     string
		thought  string
		errorish string
	}{
		{"stripped, others keep their bytes", plain, on, `{"thought":"because","city":"Oslo", "n": 1.50}`, `{"city":"Oslo","n":1.50}`, "because", ""},
		{"stripped from the middle", plain, on, `{"city":"Oslo","thought":"x","n":[1, 2]}`, `{"city":"Oslo","n":[1, 2]}`, "x", ""},
		{"escaped key", plain, on, `{"\u0074hought":"x","city":"Oslo"}`, `{"city":"Oslo"}`, "x", ""},
		{"only the thought", plain, on, `{"thought":"x"}`, `{}`, "x", ""},
		{"not a string", plain, on, `{"thought":{"a":1},"city":"Oslo"}`, `{"city":"Oslo"}`, `{"a":1}`, ""},
		{"model sent none", plain, on, `{"city":"Oslo"}`, `{"city":"Oslo"}`, "", ""},
		{"collision keeps the real parameter", colliding, on, `{"thought_":"why","thought":"real"}`, `{"thought":"real"}`, "why", ""},
		{"collision without injected thought", colliding, on, `{"thought":"real"}`, `{"thought":"real"}`, "", ""},
		{"think off leaves arguments alone", plain, off, `{"thought":"x", "city":"Oslo"}`, `{"thought":"x", "city":"Oslo"}`, "", ""},
		{"tool opted out", optedOut, on, `{"thought":"x"}`, `{"thought":"x"}`, "", ""},
		{"empty arguments", plain, on, ``, ``, "", ""},
		{"not an object", plain, on, `["thought"]`, ``, "", "not a JSON object"},
		{"invalid JSON", plain, on, `{"thought":`, ``, "", "not valid JSON"},
		{"trailing data", plain, on, `{"thought":"x"} {}`, ``, "", "trailing data"},
	}
	for _, c := range cases {
		got, thought, err := StripThought(c.def, c.opts, messages.JSON(c.args))
		if c.errorish != "" {
			if err == nil || !strings.Contains(err.Error(), c.errorish) || !strings.Contains(err.Error(), c.def.Name) {
				t.Errorf("%s: error %v, want one naming the tool and %q", c.name, err, c.errorish)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if string(got) != c.want || thought != c.thought {
			t.Errorf("%s: got %s, %q; want %s, %q", c.name, got, thought, c.want, c.thought)
		}
	}
}

// What Format injects, StripThought removes, for every format.
func TestThoughtRoundTrip(t *testing.T) {
	def := messages.ToolDefinition{Name: "a-x", InputSchema: messages.JSON(`{"type":"object","properties":{"thought":{"type":"string"},"thought_":{"type":"string"}}}`)}
	for _, format := range Formats() {
		out, err := Format([]messages.ToolDefinition{def}, format, Options{Think: true})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(out[0], []byte(`"thought__":{`)) {
			t.Fatalf("%s: no thought__ property: %s", format, out[0])
		}
	}
	args, thought, err := StripThought(&def, Options{Think: true}, messages.JSON(`{"thought__":"r","thought":"a","thought_":"b"}`))
	if err != nil || string(args) != `{"thought":"a","thought_":"b"}` || thought != "r" {
		t.Errorf("got %s, %q, %v", args, thought, err)
	}
}
