// Package schemacost compiles tool input schemas and bounds what validating
// arguments against them can cost, before any argument is seen.
//
// Validating a value against a JSON Schema evaluates, at every place in
// the value, each subschema that applies there: the in-place applicators
// ($ref, allOf, anyOf, oneOf, not, if/then/else, dependentSchemas…) fan out
// at the same place, and properties, items and their kin descend one
// level. Under recursion the fan-out multiplies from level to level: a
// schema whose every level offers two identical recursive oneOf branches
// evaluates 2^d subschemas at depth d, so a 100-byte argument costs a
// second and most of a gigabyte. The validation library takes no context
// and counts nothing, so the bound is computed statically, once, when the
// schema is compiled.
//
// Check walks the compiled schema graph and computes, for every depth up
// to messages.MaxJSONDepth, an upper bound of the subschemas evaluated at
// one place of the value at that depth, whatever the value's keys and
// array positions (each property name, "any other key", each tuple
// position and "any later item" is tried). Two bounds are kept, one
// computed from the root down and one from the leaves up, each loose
// where the other is tight, and the smaller counts. A schema whose bound
// exceeds MaxEvaluationsPerValue at some depth, or that applies itself to
// the same place in a cycle (which the validator would report on every
// call), is refused with a CostError. Below the budget, validating
// arguments of n values costs at most n × MaxEvaluationsPerValue
// subschema evaluations.
//
// The package is pure: it imports no NATS package, so that the worker
// runtime refuses such a schema when a tool is registered and the
// coordinator refuses a call to a tool whose catalog schema is one.
package schemacost
