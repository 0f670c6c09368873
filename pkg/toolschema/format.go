package toolschema

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// The formats Format produces.
const (
	// OpenAIChat is a Chat Completions tool:
	// {"type":"function","function":{"name","description","parameters","strict"}}.
	OpenAIChat = "openai-chat"
	// OpenAIResponses is a Responses API tool:
	// {"type":"function","name","description","parameters","strict"}.
	OpenAIResponses = "openai-responses"
	// Anthropic is a Messages API tool: {"name","description","input_schema"}.
	Anthropic = "anthropic"
	// Gemini is a function declaration: {"name","description","parameters"}.
	Gemini = "gemini"
	// MCP is a Model Context Protocol tool:
	// {"name","title","description","inputSchema","outputSchema","annotations"}.
	MCP = "mcp"
)

type formatSpec struct {
	dialect dialect
	build   func(t *prepared, opts Options) *object
}

var formats = map[string]formatSpec{
	OpenAIChat:      {dialectOpenAI, buildOpenAIChat},
	OpenAIResponses: {dialectOpenAI, buildOpenAIResponses},
	Anthropic:       {dialectAnthropic, buildAnthropic},
	Gemini:          {dialectGemini, buildGemini},
	MCP:             {dialectMCP, buildMCP},
}

// ErrUnknownFormat is matched by the error of a format name that is not one of Formats.
var ErrUnknownFormat = errors.New("unknown tool schema format")

func unknownFormat(format string) error {
	return fmt.Errorf("%w %q; known formats: %s", ErrUnknownFormat, format, strings.Join(Formats(), ", "))
}

// Formats returns the names of the known formats, sorted.
func Formats() []string {
	out := make([]string, 0, len(formats))
	for f := range formats {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// Options tune Format.
type Options struct {
	// Think adds a required "thought" string property to each tool's input
	// schema, in which the model writes its step-by-step reasoning for the
	// call before the arguments. A tool's Metadata.ThinkAugment overrides
	// this choice. Remove the property from the model's arguments with
	// StripThought before validating or executing them.
	Think bool
	// Strict asks OpenAI formats for strict schema adherence, set only on
	// the tools whose schemas strict mode can take without a change of
	// meaning (see makeStrict); the others go without. Other formats ignore it.
	Strict bool
}

var toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// prepared is one tool ready for a format's wrapper.
type prepared struct {
	def    *messages.ToolDefinition
	name   string
	input  *object
	strict bool
}

// Format renders each definition as a tool of the format, sorted by name.
// The output is deterministic: the same definitions and options give the
// same bytes, properties in their source order, so provider prompt caches
// hit.
//
// Every format gets an input schema whose root is an object schema with
// "type": "object"; root-level allOf/anyOf/oneOf of object schemas are
// folded into the root's properties (Anthropic rejects them at the root,
// OpenAI wants a plain object), except for MCP, whose clients take JSON
// Schema as is. A root "$ref" is replaced by its target. Per format:
//
//   - openai-chat, openai-responses: "$schema" is removed; arrays without
//     "items" get "items": {} and boolean subschemas become objects, as
//     OpenAI's validator demands; "$ref"s that do not resolve inside the
//     schema are removed. Union types, const, anyOf, oneOf, $defs and local
//     $refs are kept. "strict" follows Options.Strict where eligible; the
//     Responses API defaults to strict, so there "strict" is always written.
//   - anthropic: "$schema" and dangling "$ref"s are removed; everything
//     else of JSON Schema is kept.
//   - gemini: rewritten into Gemini's OpenAPI 3.0 subset (see
//     geminiConverter). A tool without parameters has no "parameters", as
//     Gemini rejects an object schema without properties, and an empty
//     description becomes the tool's title or name, as Gemini requires one.
//   - mcp: the schema is kept but for dangling "$ref"s; outputSchema is
//     the output schema when it admits only objects, the output schema
//     wrapped under "result" when it admits no object (ForMCP wraps such
//     values so), and left out otherwise (see mcpOutputSchema); the tags
//     read_only, destructive and network become the readOnlyHint,
//     destructiveHint and openWorldHint annotations.
//
// Names must match ^[a-zA-Z0-9_-]{1,64}$, as every provider requires, and
// be unique; an error names the tool that fails either rule or whose
// schema cannot be used.
func Format(defs []messages.ToolDefinition, format string, opts Options) ([]messages.JSON, error) {
	objs, err := formatObjects(defs, format, opts)
	if err != nil {
		return nil, err
	}
	out := make([]messages.JSON, len(objs))
	var buf bytes.Buffer
	for i, o := range objs {
		buf.Reset()
		encode(&buf, o)
		out[i] = messages.JSON(bytes.Clone(buf.Bytes()))
	}
	return out, nil
}

// Tools renders the definitions as the value of the "tools" field of a
// request to the format's provider: an array of Format's tools, except for
// Gemini, where it is one tool holding every declaration:
// [{"functionDeclarations":[...]}]. MCP's is the "tools" array of a
// tools/list result.
func Tools(defs []messages.ToolDefinition, format string, opts Options) (messages.JSON, error) {
	objs, err := formatObjects(defs, format, opts)
	if err != nil {
		return nil, err
	}
	var list any = objectsToAny(objs)
	if format == Gemini {
		list = []any{&object{keys: []string{"functionDeclarations"}, vals: []any{list}}}
	}
	return messages.JSON(encodeToString(list)), nil
}

func formatObjects(defs []messages.ToolDefinition, format string, opts Options) ([]*object, error) {
	spec, ok := formats[format]
	if !ok {
		return nil, unknownFormat(format)
	}
	tools := make([]*prepared, len(defs))
	for i := range defs {
		d := &defs[i]
		name := d.Name
		if n := d.ToolName(); name == "" && n.Validate() == nil {
			name = n.String()
		}
		if !toolNamePattern.MatchString(name) {
			return nil, fmt.Errorf("tool %q: name must match %s", name, toolNamePattern)
		}
		root, err := parseRoot(d.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", name, err)
		}
		thought := ""
		if thinks(d, opts) {
			thought = thoughtNameOf(root)
		}
		input, err := sanitizeRoot(root, spec.dialect)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", name, err)
		}
		if thought != "" {
			addThought(input, thought, spec.dialect)
		}
		t := &prepared{def: d, name: name, input: input}
		if spec.dialect == dialectOpenAI && opts.Strict {
			t.strict = makeStrict(input)
		}
		tools[i] = t
	}
	slices.SortFunc(tools, func(a, b *prepared) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(tools); i++ {
		if tools[i].name == tools[i-1].name {
			return nil, fmt.Errorf("tool %q: defined twice", tools[i].name)
		}
	}
	out := make([]*object, len(tools))
	for i, t := range tools {
		out[i] = spec.build(t, opts)
	}
	return out, nil
}

func buildOpenAIChat(t *prepared, _ Options) *object {
	fn := &object{}
	fn.set("name", t.name)
	if t.def.Description != "" {
		fn.set("description", t.def.Description)
	}
	fn.set("parameters", t.input)
	if t.strict {
		fn.set("strict", true)
	}
	out := &object{}
	out.set("type", "function")
	out.set("function", fn)
	return out
}

func buildOpenAIResponses(t *prepared, _ Options) *object {
	out := &object{}
	out.set("type", "function")
	out.set("name", t.name)
	if t.def.Description != "" {
		out.set("description", t.def.Description)
	}
	out.set("parameters", t.input)
	out.set("strict", t.strict)
	return out
}

func buildAnthropic(t *prepared, _ Options) *object {
	out := &object{}
	out.set("name", t.name)
	if t.def.Description != "" {
		out.set("description", t.def.Description)
	}
	out.set("input_schema", t.input)
	return out
}

func buildGemini(t *prepared, _ Options) *object {
	out := &object{}
	out.set("name", t.name)
	desc := t.def.Description
	if desc == "" {
		desc = t.def.Title
	}
	if desc == "" {
		desc = t.name
	}
	out.set("description", desc)
	if props, ok := t.input.obj("properties"); ok && props.len() > 0 {
		out.set("parameters", t.input)
	}
	return out
}

func buildMCP(t *prepared, _ Options) *object {
	out := &object{}
	out.set("name", t.name)
	if t.def.Title != "" {
		out.set("title", t.def.Title)
	}
	if t.def.Description != "" {
		out.set("description", t.def.Description)
	}
	out.set("inputSchema", t.input)
	if len(t.def.OutputSchema) > 0 {
		if o := mcpOutputSchema(t.def.OutputSchema); o != nil {
			out.set("outputSchema", o)
		}
	}
	ann := &object{}
	for _, h := range [][2]string{{messages.TagReadOnly, "readOnlyHint"}, {messages.TagDestructive, "destructiveHint"}, {messages.TagNetwork, "openWorldHint"}} {
		if t.def.Metadata.HasTag(h[0]) {
			ann.set(h[1], true)
		}
	}
	if ann.len() > 0 {
		out.set("annotations", ann)
	}
	return out
}
