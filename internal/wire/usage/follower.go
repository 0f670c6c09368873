package usage

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// Follower keeps what the indexer needs of the usage bucket: every
// agent's evidence for every tool, and the learning switch, from the
// entries of a watch of the bucket (Apply); and says which tools' learned
// fields changed (Changes). It is used by one goroutine.
type Follower struct {
	learn    search.LearnConfig
	disabled bool
	// records holds each tool's evidence by the key it is stored under.
	records map[messages.ToolName]map[string]search.UsageRecord
	dirty   map[messages.ToolName]bool
	// refold is set when the switch changed: every tool's field changes.
	refold bool
	// learned holds the learned fields last returned, to clear them all
	// when learning is switched off.
	learned map[messages.ToolName]bool
}

// NewFollower returns a follower that folds evidence with learn.
func NewFollower(learn search.LearnConfig) *Follower {
	return &Follower{
		learn:   learn,
		records: map[messages.ToolName]map[string]search.UsageRecord{},
		dirty:   map[messages.ToolName]bool{},
		learned: map[messages.ToolName]bool{},
	}
}

// Disabled tells whether learning is switched off.
func (f *Follower) Disabled() bool { return f.disabled }

// Apply takes one entry of a watch of the usage bucket (nil, which a watch
// sends once it sent the current values, is ignored) and reports whether
// a learned field may have changed. A record that does not decode counts
// as none.
func (f *Follower) Apply(e jetstream.KeyValueEntry) bool {
	if e == nil {
		return false
	}
	put := e.Operation() == jetstream.KeyValuePut
	if e.Key() == SettingsKey {
		var s Settings
		if put && json.Unmarshal(e.Value(), &s) != nil {
			return false
		}
		if s.Disabled == f.disabled {
			return false
		}
		f.disabled, f.refold = s.Disabled, true
		return true
	}
	tool, ok := ParseEvidenceKey(e.Key())
	if !ok {
		return false
	}
	byKey := f.records[tool]
	var rec search.UsageRecord
	if put && json.Unmarshal(e.Value(), &rec) == nil {
		if byKey == nil {
			byKey = map[string]search.UsageRecord{}
			f.records[tool] = byKey
		}
		byKey[e.Key()] = rec
	} else {
		if _, had := byKey[e.Key()]; !had {
			return false
		}
		delete(byKey, e.Key())
		if len(byKey) == 0 {
			delete(f.records, tool)
		}
	}
	f.dirty[tool] = true
	return true
}

// Changes returns the learned field of every tool whose evidence changed
// since the last call (of every tool after the switch changed), empty for
// a tool without evidence or when learning is off, and forgets the changes.
func (f *Follower) Changes() map[messages.ToolName]search.Learned {
	out := map[messages.ToolName]search.Learned{}
	if f.refold {
		for tool := range f.records {
			f.dirty[tool] = true
		}
		for tool := range f.learned {
			f.dirty[tool] = true
		}
		f.refold = false
	}
	for tool := range f.dirty {
		var learned search.Learned
		if !f.disabled {
			learned = f.Fold(tool)
		}
		out[tool] = learned
		if len(learned.Terms) > 0 {
			f.learned[tool] = true
		} else {
			delete(f.learned, tool)
		}
	}
	clear(f.dirty)
	return out
}

// Fold returns the learned field the tool's evidence makes, and how many
// principals taught it, whatever the switch says.
func (f *Follower) Fold(tool messages.ToolName) search.Learned {
	byKey := f.records[tool]
	list := make([]search.UsageRecord, 0, len(byKey))
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		list = append(list, byKey[key])
	}
	return search.Fold(list, f.learn)
}

// Records returns how many tools have evidence, and how many records
// (one per agent and tool) there are.
func (f *Follower) Records() (tools, records int) {
	for _, byKey := range f.records {
		records += len(byKey)
	}
	return len(f.records), records
}
