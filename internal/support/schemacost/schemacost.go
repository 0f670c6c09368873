package schemacost

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolbus/toolbus/pkg/messages"
)

// MaxEvaluationsPerValue is the budget: how many subschemas may be
// evaluated, at worst, at one place of an argument value. Ordinary tool
// schemas, unions of dozens of object types included, stay in the tens
// or hundreds; a schema whose branching multiplies under recursion passes
// it within a dozen levels.
const MaxEvaluationsPerValue = 2048

// MaxDepth is the deepest place of a value the bound is computed for: no
// argument nests deeper (messages.CheckJSONDepth).
const MaxDepth = messages.MaxJSONDepth

// ErrTooCostly is matched by every CostError.
var ErrTooCostly = errors.New("input schema too costly to validate")

// CostError reports a schema that can cost more than the budget to
// validate a value against.
type CostError struct {
	// Depth is the first nesting level of a value at which the bound
	// exceeds the budget; -1 when no bound could be computed (Reason).
	Depth int
	// Reason says why no bound could be computed.
	Reason string
	// Evaluations is the bound at Depth.
	Evaluations float64
	// Location is the schema location most evaluated there.
	Location string
}

func (e *CostError) Error() string {
	if e.Depth < 0 {
		return fmt.Sprintf("%v: at %s, %s", ErrTooCostly, e.Location, e.Reason)
	}
	return fmt.Sprintf("%v: at nesting depth %d a value can be checked against %.3g subschemas (at most %d); branches under %s multiply at every level",
		ErrTooCostly, e.Depth, e.Evaluations, MaxEvaluationsPerValue, e.Location)
}

// Is makes errors.Is(err, ErrTooCostly) true.
func (e *CostError) Is(target error) bool { return target == ErrTooCostly }

// resourceURL names the schema being compiled; tool schemas are self-contained.
const resourceURL = "toolbus:input-schema"

// refusingLoader keeps schemas from pulling in files or URLs.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %q is not loaded; tool schemas must be self-contained", url)
}

// Compile compiles a tool's input schema, which must be self-contained
// (no reference leaves it); an empty schema is {"type":"object"}. It does
// not check the cost: see Check.
func Compile(schema []byte) (*jsonschema.Schema, error) {
	if len(schema) == 0 {
		schema = []byte(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("input schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refusingLoader{})
	if err := c.AddResource(resourceURL, doc); err != nil {
		return nil, err
	}
	return c.Compile(resourceURL)
}

// CheckJSON compiles schema and checks its cost. A schema that does not
// compile is reported as such, not as too costly.
func CheckJSON(schema []byte) error {
	sch, err := Compile(schema)
	if err != nil {
		return err
	}
	return Check(sch)
}
