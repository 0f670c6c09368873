package coordinator

import (
	"slices"
	"sync"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// formatCache keeps each tool's schema per format and options for as long
// as the catalog holds the same revision of the tool. Agents ask for the
// same schemas on every model iteration, and a format costs tens of
// microseconds per tool.
type formatCache struct {
	mu      sync.Mutex
	entries map[formatKey]messages.JSON
}

type formatKey struct {
	tool     string
	revision uint64
	format   string
	opts     toolschema.Options
}

// maxFormatEntries bounds the cache; when full it starts over.
const maxFormatEntries = 100_000

// format returns the schemas of defs, in the order of defs, formatting
// only those not cached. revisions holds each tool's catalog revision.
func (f *formatCache) format(defs []messages.ToolDefinition, revisions []uint64, format string, opts toolschema.Options) ([]messages.JSON, error) {
	out := make([]messages.JSON, len(defs))
	var missing []messages.ToolDefinition
	var missingAt []int
	f.mu.Lock()
	if f.entries == nil {
		f.entries = map[formatKey]messages.JSON{}
	}
	for i, d := range defs {
		if s, ok := f.entries[formatKey{d.Name, revisions[i], format, opts}]; ok {
			out[i] = s
		} else {
			missing = append(missing, d)
			missingAt = append(missingAt, i)
		}
	}
	f.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	schemas, err := toolschema.Format(missing, format, opts)
	if err != nil {
		return nil, err
	}
	// Format orders its output by name.
	byName := make(map[string]messages.JSON, len(missing))
	sorted := make([]string, 0, len(missing))
	for _, d := range missing {
		sorted = append(sorted, d.Name)
	}
	slices.Sort(sorted)
	for i, name := range sorted {
		byName[name] = schemas[i]
	}
	f.mu.Lock()
	if len(f.entries)+len(missing) > maxFormatEntries {
		f.entries = map[formatKey]messages.JSON{}
	}
	for k, i := range missingAt {
		s := byName[missing[k].Name]
		out[i] = s
		f.entries[formatKey{missing[k].Name, revisions[i], format, opts}] = s
	}
	f.mu.Unlock()
	return out, nil
}
