package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Bucket is the part of a JetStream KV bucket the catalog uses;
// jetstream.KeyValue satisfies it.
type Bucket interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
	WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
	ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error)
}

// Store writes to the catalog.
type Store struct {
	bucket Bucket
}

// NewStore returns a store on the bucket.
func NewStore(bucket Bucket) *Store { return &Store{bucket: bucket} }

// PutTool writes a tool definition, unless the catalog already holds an identical one.
func (s *Store) PutTool(ctx context.Context, def *messages.ToolDefinition) error {
	name := def.ToolName()
	if err := name.Validate(); err != nil {
		return err
	}
	if def.Name != name.String() {
		return fmt.Errorf("tool %q: name does not match namespace %q and method %q", def.Name, def.Namespace, def.Method)
	}
	key, _ := messages.ToolKey(name)
	data, err := json.Marshal(def)
	if err != nil {
		return fmt.Errorf("encode tool %s: %w", def.Name, err)
	}
	if old, err := s.bucket.Get(ctx, key); err == nil && string(old.Value()) == string(data) {
		return nil
	}
	if _, err := s.bucket.Put(ctx, key, data); err != nil {
		return fmt.Errorf("store tool %s: %w", def.Name, err)
	}
	return nil
}

// DeleteTool removes a tool from the catalog.
func (s *Store) DeleteTool(ctx context.Context, name messages.ToolName) error {
	key, err := messages.ToolKey(name)
	if err != nil {
		return err
	}
	if err := s.bucket.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete tool %s: %w", name, err)
	}
	return nil
}

// HasTool reports whether the bucket holds the tool now, read from the
// bucket itself rather than a view that may lag it.
func (s *Store) HasTool(ctx context.Context, name messages.ToolName) (bool, error) {
	key, err := messages.ToolKey(name)
	if err != nil {
		return false, err
	}
	if _, err := s.bucket.Get(ctx, key); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("read tool %s: %w", name, err)
	}
	return true, nil
}

// NamespaceTools lists the tools of a namespace the bucket holds now,
// read from the bucket itself rather than a view that may lag it.
func (s *Store) NamespaceTools(ctx context.Context, ns string) ([]messages.ToolName, error) {
	if err := messages.ValidateNamespace(ns); err != nil {
		return nil, err
	}
	prefix := "tools." + ns + "."
	keys, err := s.bucket.ListKeysFiltered(ctx, prefix+">")
	if err != nil {
		return nil, fmt.Errorf("list the tools of %s: %w", ns, err)
	}
	defer func() { _ = keys.Stop() }()
	var names []messages.ToolName
	for key := range keys.Keys() {
		names = append(names, messages.ToolName{Namespace: ns, Method: strings.TrimPrefix(key, prefix)})
	}
	return names, nil
}

// SetDisabled switches a tool (method non-empty) or a whole namespace off
// with a reason, or back on when disabled is false.
func (s *Store) SetDisabled(ctx context.Context, ns, method string, disabled bool, state messages.DisabledState) error {
	if err := messages.ValidateNamespace(ns); err != nil {
		return err
	}
	key := "disabled." + ns
	if method != "" {
		if _, err := messages.ToolKey(messages.ToolName{Namespace: ns, Method: method}); err != nil {
			return err
		}
		key += "." + method
	}
	if !disabled {
		if err := s.bucket.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("enable %s: %w", key, err)
		}
		return nil
	}
	data, err := json.Marshal(state)
	if err != nil {
		return err
	}
	if _, err := s.bucket.Put(ctx, key, data); err != nil {
		return fmt.Errorf("disable %s: %w", key, err)
	}
	return nil
}

// Heartbeat records that a worker serves a namespace.
func (s *Store) Heartbeat(ctx context.Context, hb *messages.WorkerHeartbeat) error {
	key, err := messages.WorkerKey(hb.Namespace, hb.WorkerID)
	if err != nil {
		return err
	}
	data, err := json.Marshal(hb)
	if err != nil {
		return err
	}
	if _, err := s.bucket.Put(ctx, key, data); err != nil {
		return fmt.Errorf("heartbeat of worker %s: %w", hb.WorkerID, err)
	}
	return nil
}

// RemoveWorker deletes a worker's heartbeat: it no longer serves the namespace.
func (s *Store) RemoveWorker(ctx context.Context, ns, workerID string) error {
	key, err := messages.WorkerKey(ns, workerID)
	if err != nil {
		return err
	}
	if err := s.bucket.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("remove worker %s: %w", workerID, err)
	}
	return nil
}
