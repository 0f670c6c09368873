package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolbus/toolbus/internal/support/schemacost"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// schemaCache keeps each tool's compiled input schema for as long as the
// catalog holds the same revision of the tool.
type schemaCache struct {
	mu      sync.Mutex
	entries map[string]cachedSchema
	// redactions holds the tools' schemas compiled for redaction, which
	// the audit log shares.
	redactions *redactions
}

type cachedSchema struct {
	revision uint64
	schema   *jsonschema.Schema
	err      error
	// thought is the name a think-augmented schema of the tool gives its
	// "thought" parameter, quoted as it appears in JSON arguments.
	thought []byte
}

func newSchemaCache() *schemaCache {
	return &schemaCache{entries: map[string]cachedSchema{}, redactions: newRedactions()}
}

func (s *schemaCache) get(t *catalog.Tool) cachedSchema {
	name := t.Definition.Name
	s.mu.Lock()
	e, ok := s.entries[name]
	s.mu.Unlock()
	if ok && e.revision == t.Revision {
		return e
	}
	sch, err := compileSchema(t.Definition.InputSchema)
	thought, _ := json.Marshal(toolschema.ThoughtProperty(t.Definition.InputSchema))
	e = cachedSchema{revision: t.Revision, schema: sch, err: err, thought: thought}
	s.mu.Lock()
	s.entries[name] = e
	s.mu.Unlock()
	return e
}

// stripThought removes the thought a think-augmented schema asked the
// model for; found says whether there was one. Arguments that cannot hold
// one are returned as they are without being parsed.
func (s *schemaCache) stripThought(t *catalog.Tool, args messages.JSON) (stripped messages.JSON, found bool, err error) {
	if !bytes.Contains(args, s.get(t).thought) {
		return args, false, nil
	}
	stripped, _, err = toolschema.StripThought(&t.Definition, toolschema.Options{Think: true}, args)
	// Arguments without a thought come back as they were.
	return stripped, err == nil && !sameBytes(stripped, args), err
}

// redaction returns the tool's schema compiled for redaction; a nil
// cache compiles it for this use alone.
func (s *schemaCache) redaction(def *messages.ToolDefinition) *policy.Redaction {
	if s == nil {
		return policy.CompileRedaction(def.InputSchema)
	}
	return s.redactions.of(def)
}

// sameBytes reports whether a and b are the same bytes in memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// redactions keeps each tool's input schema compiled for redaction
// (policy.CompileRedaction) for as long as the tool keeps the same
// schema: the approvals' and the audit log's copies of a call's arguments
// are redacted without reading the schema again. A nil *redactions
// compiles the schema at every use.
type redactions struct {
	mu    sync.Mutex
	tools map[string]compiledRedaction
}

type compiledRedaction struct {
	schema    messages.JSON
	redaction *policy.Redaction
}

func newRedactions() *redactions { return &redactions{tools: map[string]compiledRedaction{}} }

// of returns the tool's schema compiled for redaction.
func (r *redactions) of(def *messages.ToolDefinition) *policy.Redaction {
	if r == nil {
		return policy.CompileRedaction(def.InputSchema)
	}
	r.mu.Lock()
	e, ok := r.tools[def.Name]
	r.mu.Unlock()
	// The same schema is, as a rule, the same bytes in memory: a compare
	// that ends at once.
	if ok && bytes.Equal(e.schema, def.InputSchema) {
		return e.redaction
	}
	e = compiledRedaction{schema: def.InputSchema, redaction: policy.CompileRedaction(def.InputSchema)}
	r.mu.Lock()
	r.tools[def.Name] = e
	r.mu.Unlock()
	return e.redaction
}

// compileSchema compiles a tool's input schema and refuses one that could
// cost more to validate than schemacost's budget. The validation library
// takes no context and cannot be stopped, so the bound is static: it is
// computed once per revision of the tool, and a call to a tool whose
// schema passes it costs at most schemacost.MaxEvaluationsPerValue
// subschema evaluations per value of its arguments. Workers refuse such
// schemas when they register a tool; this catches those written by older
// workers or by hand.
func compileSchema(schema messages.JSON) (*jsonschema.Schema, error) {
	sch, err := schemacost.Compile(schema)
	if err != nil {
		return nil, err
	}
	if err := schemacost.Check(sch); err != nil {
		return nil, err
	}
	return sch, nil
}

// validate checks arguments read by policy.ParseArguments (numbers as
// json.Number, as the schema library reads them) against the tool's input
// schema and lists every violation.
func (s *schemaCache) validate(t *catalog.Tool, inst any) error {
	cached := s.get(t)
	sch, err := cached.schema, cached.err
	if errors.Is(err, schemacost.ErrTooCostly) {
		return messages.Errorf(messages.CodeBadRequest, "tool %s cannot be called: %v", t.Definition.Name, err)
	}
	if err != nil {
		return messages.Errorf(messages.CodeInternal, "tool %s has an unusable input schema: %v", t.Definition.Name, err)
	}
	if err := sch.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return messages.Errorf(messages.CodeInvalidArguments, "arguments of %s: %v", t.Definition.Name, err)
		}
		e := &messages.Error{Code: messages.CodeInvalidArguments, Message: fmt.Sprintf("arguments of %s do not match its input schema", t.Definition.Name)}
		for _, unit := range ve.BasicOutput().Errors {
			if unit.Error == nil {
				continue
			}
			loc := unit.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			e.Details = append(e.Details, fmt.Sprintf("%s: %s", loc, unit.Error.String()))
		}
		if len(e.Details) > 0 {
			e.Message += ": " + e.Details[0]
		}
		return e
	}
	return nil
}
