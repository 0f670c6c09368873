package toolschema

import (
	"bytes"
	"fmt"

	"github.com/toolbus/toolbus/pkg/messages"
)

// ThoughtDescription describes the property that think augmentation adds.
const ThoughtDescription = "Step-by-step reasoning for this call."

// thinks reports whether the tool's schema gets the thought property.
func thinks(def *messages.ToolDefinition, opts Options) bool {
	if def.Metadata.ThinkAugment != nil {
		return *def.Metadata.ThinkAugment
	}
	return opts.Think
}

// ThoughtProperty returns the name that think augmentation gives the
// thought property in the tool's input schema: "thought", or "thought_",
// "thought__"… when the schema already has a property of that name at its
// root (counting the properties of root-level allOf/anyOf/oneOf branches,
// which Format folds into the root). It depends on the schema alone.
func ThoughtProperty(inputSchema messages.JSON) string {
	return thoughtName(inputSchema)
}

func thoughtName(raw []byte) string {
	root, err := parseRoot(raw)
	if err != nil {
		return "thought"
	}
	return thoughtNameOf(root)
}

func thoughtNameOf(root *object) string {
	taken := func(name string) bool {
		if p, ok := root.obj("properties"); ok && p.has(name) {
			return true
		}
		for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
			l, _ := root.list(kw)
			for _, b := range l {
				if bo := resolveBranch(root, b); bo != nil {
					if p, ok := bo.obj("properties"); ok && p.has(name) {
						return true
					}
				}
			}
		}
		return false
	}
	name := "thought"
	for taken(name) {
		name += "_"
	}
	return name
}

// addThought puts the thought property first in the root's properties and
// first in required, so that models write their reasoning before the
// arguments.
func addThought(root *object, name string, d dialect) {
	prop := &object{}
	if d == dialectGemini {
		prop.set("type", "STRING")
	} else {
		prop.set("type", "string")
	}
	prop.set("description", ThoughtDescription)
	props, ok := root.obj("properties")
	if !ok {
		props = &object{}
	} else {
		props = props.clone()
	}
	props.setFirst(name, prop)
	root.set("properties", props)
	required := append([]string{name}, stringList(root, "required")...)
	root.set("required", toAny(appendNew(nil, required...)))
	if d == dialectGemini && props.len() > 1 {
		order := make([]any, 0, props.len())
		for _, k := range props.keys {
			order = append(order, k)
		}
		root.set("propertyOrdering", order)
	}
	if d == dialectGemini {
		// Keep Gemini's key order: properties and propertyOrdering before required.
		*root = *inGeminiOrder(root)
	}
}

// StripThought removes the thought property that Format added to the
// tool's schema (under opts, or the tool's Metadata.ThinkAugment) from the
// model's arguments, and returns the arguments without it and the thought
// text. Arguments are returned unchanged, byte for byte, when no thought
// was added or the model sent none; otherwise the other members keep their
// order and their values' bytes. Arguments that are not a JSON object are
// an error only when a thought was added.
func StripThought(def *messages.ToolDefinition, opts Options, arguments messages.JSON) (messages.JSON, string, error) {
	if !thinks(def, opts) || len(bytes.TrimSpace(arguments)) == 0 {
		return arguments, "", nil
	}
	name := thoughtName(def.InputSchema)
	p := newParser(arguments)
	p.Space()
	if p.Pos >= len(p.Data) || p.Data[p.Pos] != '{' {
		if _, err := p.Skip(0); err != nil {
			return nil, "", fmt.Errorf("arguments of tool %q are not valid JSON: %w", def.Name, err)
		}
		return nil, "", fmt.Errorf("arguments of tool %q are not a JSON object", def.Name)
	}
	p.Pos++
	type member struct {
		key   string
		value []byte
	}
	var members []member
	thought, found := "", false
	p.Space()
	if p.Pos < len(p.Data) && p.Data[p.Pos] == '}' {
		p.Pos++
	} else {
		for {
			p.Space()
			key, err := p.String()
			if err == nil {
				p.Space()
				if p.Pos >= len(p.Data) || p.Data[p.Pos] != ':' {
					err = p.Fail("':'")
				} else {
					p.Pos++
					p.Space()
				}
			}
			var value []byte
			if err == nil {
				value, err = p.Skip(1)
			}
			if err != nil {
				return nil, "", fmt.Errorf("arguments of tool %q are not valid JSON: %w", def.Name, err)
			}
			if key == name {
				found = true
				thought = string(value)
				if v, err := parse(value); err == nil {
					if s, ok := v.(string); ok {
						thought = s
					}
				}
			} else {
				members = append(members, member{key, value})
			}
			p.Space()
			if p.Pos < len(p.Data) && p.Data[p.Pos] == ',' {
				p.Pos++
				continue
			}
			if p.Pos < len(p.Data) && p.Data[p.Pos] == '}' {
				p.Pos++
				break
			}
			return nil, "", fmt.Errorf("arguments of tool %q are not valid JSON: %w", def.Name, p.Fail("',' or '}'"))
		}
	}
	p.Space()
	if p.Pos < len(p.Data) {
		return nil, "", fmt.Errorf("arguments of tool %q have trailing data after the JSON object", def.Name)
	}
	if !found {
		return arguments, "", nil
	}
	var out bytes.Buffer
	out.Grow(len(arguments))
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		writeString(&out, m.key)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return messages.JSON(out.Bytes()), thought, nil
}
