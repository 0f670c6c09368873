package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// Store is the operators' hold on the usage bucket: the learning switch,
// what the evidence says of a tool, and forgetting it.
type Store struct {
	kv    jetstream.KeyValue
	js    jetstream.JetStream
	learn search.LearnConfig
}

// NewStore returns the store of the usage bucket kv.
func NewStore(kv jetstream.KeyValue, js jetstream.JetStream, learn search.LearnConfig) *Store {
	return &Store{kv: kv, js: js, learn: learn}
}

// Settings reads the learning switch; none means learning is on.
func (s *Store) Settings(ctx context.Context) (Settings, error) {
	e, err := s.kv.Get(ctx, SettingsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Settings{}, nil
	}
	if err != nil {
		return Settings{}, err
	}
	var set Settings
	if err := json.Unmarshal(e.Value(), &set); err != nil {
		return Settings{}, fmt.Errorf("learning switch: %w", err)
	}
	return set, nil
}

// SetSettings writes the learning switch.
func (s *Store) SetSettings(ctx context.Context, set Settings) error {
	data, err := json.Marshal(&set)
	if err != nil {
		return err
	}
	_, err = s.kv.Put(ctx, SettingsKey, data)
	return err
}

// ToolEvidence is what the evidence says of one tool.
type ToolEvidence struct {
	// Agents and Users count the agents whose evidence there is, and the
	// users among them that identities name (records of calls made
	// without identities name none).
	Agents, Users int
	// Turns is the evidence's turns, faded, summed over agents.
	Turns float64
	// Learned is the learned field the evidence makes (search.FoldUsage).
	Learned []search.LearnedTerm
	// Last is when the evidence last changed.
	Last time.Time
}

// Tool reads every agent's evidence for one tool.
func (s *Store) Tool(ctx context.Context, tool messages.ToolName) (ToolEvidence, error) {
	keys, err := s.keys(ctx, ToolFilter(tool))
	if err != nil {
		return ToolEvidence{}, err
	}
	var out ToolEvidence
	var records []search.UsageRecord
	users := map[string]bool{}
	for _, key := range keys {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return ToolEvidence{}, err
		}
		var rec search.UsageRecord
		if json.Unmarshal(e.Value(), &rec) != nil {
			continue
		}
		records = append(records, rec)
		out.Agents++
		out.Turns += rec.Turns
		if rec.User != "" {
			users[rec.User] = true
		}
		if rec.At.After(out.Last) {
			out.Last = rec.At
		}
	}
	out.Users = len(users)
	out.Learned = search.FoldUsage(records, s.learn)
	return out, nil
}

// Count returns how many tools have evidence, and how many records (one
// per agent and tool) there are.
func (s *Store) Count(ctx context.Context) (tools, records int, err error) {
	keys, err := s.keys(ctx, ToolsFilter)
	if err != nil {
		return 0, 0, err
	}
	seen := map[messages.ToolName]bool{}
	for _, key := range keys {
		if tool, ok := ParseEvidenceKey(key); ok {
			seen[tool] = true
			records++
		}
	}
	return len(seen), records, nil
}

// deletionTTL is how long the marker of a deleted key stays: the indexer
// reads it within a second or two, and one that was down reads the
// bucket anew.
const deletionTTL = time.Hour

// Reset deletes the evidence under filter (ToolFilter, ToolsFilter) and
// returns how many records it deleted. Searches of turns under way are
// kept: they are no evidence until a call of a tool they found.
func (s *Store) Reset(ctx context.Context, filter string) (int, error) {
	keys, err := s.keys(ctx, filter)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, key := range keys {
		msg := nats.NewMsg("$KV." + s.kv.Bucket() + "." + key)
		msg.Header.Set("KV-Operation", "DEL")
		if _, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgTTL(deletionTTL)); err != nil {
			return n, fmt.Errorf("delete usage key %s: %w", key, err)
		}
		n++
	}
	return n, nil
}

// keys lists the keys under filter that hold a value, sorted.
func (s *Store) keys(ctx context.Context, filter string) ([]string, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for key := range lister.Keys() {
		set[key] = true
	}
	return slices.Sorted(maps.Keys(set)), nil
}
