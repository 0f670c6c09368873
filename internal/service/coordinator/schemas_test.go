package coordinator

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/support/schemacost"
	"github.com/toolbus/toolbus/pkg/messages"
)

// twinOneOf is an input schema whose every level offers two identical
// recursive oneOf branches: validating an argument nested d levels deep
// explores 2^d branches.
const twinOneOf = `{"$defs":{"n":{"oneOf":[{"$ref":"#/$defs/t"},{"$ref":"#/$defs/t"}]},` +
	`"t":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`

// nestedC is {"c":{"c":…{}…}} nested depth levels deep.
func nestedC(depth int) messages.JSON {
	return messages.JSON(strings.Repeat(`{"c":`, depth) + "{}" + strings.Repeat("}", depth))
}

// A call to a tool whose schema is too costly to validate is refused at
// once with bad_request, whatever its arguments: the schema is not run.
func TestPathologicalSchemaRefusedQuickly(t *testing.T) {
	cache := newSchemaCache()
	tl := tool("t-twin", twinOneOf)
	args := nestedC(12)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, _, err := checkRaw(cache, tl, args)
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	t.Logf("%d-byte argument: %v, %d KiB allocated", len(args), elapsed, (after.TotalAlloc-before.TotalAlloc)>>10)
	if !errors.Is(err, &messages.Error{Code: messages.CodeBadRequest}) {
		t.Fatalf("err = %v; want bad_request", err)
	}
	if !strings.Contains(err.Error(), "t-twin") {
		t.Errorf("error %q does not name the tool", err)
	}
	// Refused before any validation: the cache holds no compiled schema
	// to run, only the reason, so the refusal costs the same on a busy
	// machine as on an idle one (its time is logged, not asserted).
	if e := cache.get(tl); e.schema != nil || !errors.Is(e.err, schemacost.ErrTooCostly) {
		t.Errorf("the cached schema: compiled %v, error %v; want none to run, refused by its cost", e.schema != nil, e.err)
	}
}

// BenchmarkPathologicalSchema measures a call to the twin-oneOf tool with
// an argument nested 12 levels deep, schema compiled once.
func BenchmarkPathologicalSchema(b *testing.B) {
	cache := newSchemaCache()
	tl := tool("t-twin", twinOneOf)
	args := nestedC(12)
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = checkRaw(cache, tl, args)
	}
}
