package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Tool is a catalog entry with the KV revision it was read at.
type Tool struct {
	Definition messages.ToolDefinition
	Revision   uint64
}

type heartbeat struct {
	at       time.Time
	interval time.Duration
	// down maps the sources the worker cannot serve now to why.
	down map[string]string
}

// aliveAt reports whether a worker whose last heartbeat is hb is alive at
// now: three of its intervals have not passed since.
func (hb heartbeat) aliveAt(now time.Time) bool { return now.Sub(hb.at) < 3*hb.interval }

// View is an in-memory copy of the catalog, kept current by a watch on the
// bucket. It is safe for concurrent use.
type View struct {
	bucket Bucket
	log    *slog.Logger
	now    func() time.Time

	mu       sync.RWMutex
	tools    map[string]*Tool
	workers  map[string]map[string]heartbeat
	disabled map[string]messages.DisabledState
	// toolsVersion counts changes of tools and switches, not heartbeats,
	// so that caches keyed by it survive heartbeats.
	toolsVersion uint64
	changed      chan struct{}
	// applied is the bucket's sequence up to which the watch has been
	// applied (the highest revision seen).
	applied uint64
}

// NewView returns a view of the bucket; Start fills it.
func NewView(bucket Bucket, log *slog.Logger) *View {
	if log == nil {
		log = slog.Default()
	}
	return &View{
		bucket:   bucket,
		log:      log,
		now:      time.Now,
		tools:    map[string]*Tool{},
		workers:  map[string]map[string]heartbeat{},
		disabled: map[string]messages.DisabledState{},
		changed:  make(chan struct{}),
	}
}

// Start loads the catalog and keeps following it until ctx ends. It
// returns once the current contents are loaded.
func (v *View) Start(ctx context.Context) error {
	w, err := v.bucket.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch catalog: %w", err)
	}
	// The watcher sends every current value, then nil, then live updates.
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch catalog: closed before the initial values arrived")
			}
			if e == nil {
				v.bump()
				go v.follow(ctx, w)
				return nil
			}
			v.apply(e)
		case <-ctx.Done():
			_ = w.Stop()
			return ctx.Err()
		}
	}
}

func (v *View) follow(ctx context.Context, w jetstream.KeyWatcher) {
	defer w.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				v.apply(e)
				v.bump()
			}
		case <-ctx.Done():
			return
		}
	}
}

func (v *View) apply(e jetstream.KeyValueEntry) {
	key := e.Key()
	deleted := e.Operation() != jetstream.KeyValuePut
	v.mu.Lock()
	defer v.mu.Unlock()
	v.applied = max(v.applied, e.Revision())
	switch {
	case strings.HasPrefix(key, "tools."):
		v.toolsVersion++
		ns, method, ok := splitKey(key, "tools.")
		if !ok {
			return
		}
		name := messages.ToolName{Namespace: ns, Method: method}.String()
		if old, ok := v.tools[name]; ok && old.Revision > e.Revision() {
			return // a read from the bucket got ahead of the watch
		}
		if deleted {
			delete(v.tools, name)
			return
		}
		var def messages.ToolDefinition
		if err := json.Unmarshal(e.Value(), &def); err != nil {
			v.log.Warn("catalog: unreadable tool definition ignored", "key", key, "error", err)
			return
		}
		if def.Name != name {
			v.log.Warn("catalog: tool definition under the wrong key ignored", "key", key, "name", def.Name)
			return
		}
		v.tools[name] = &Tool{Definition: def, Revision: e.Revision()}
	case strings.HasPrefix(key, "disabled."):
		v.toolsVersion++
		target := key[len("disabled."):]
		if deleted {
			delete(v.disabled, target)
			return
		}
		var d messages.DisabledState
		if err := json.Unmarshal(e.Value(), &d); err != nil {
			v.log.Warn("catalog: unreadable switch ignored", "key", key, "error", err)
			return
		}
		v.disabled[target] = d
	case strings.HasPrefix(key, "workers."):
		ns, id, ok := splitKey(key, "workers.")
		if !ok {
			return
		}
		if deleted {
			if v.workers[ns][id].down != nil {
				v.toolsVersion++
			}
			delete(v.workers[ns], id)
			return
		}
		var hb messages.WorkerHeartbeat
		if err := json.Unmarshal(e.Value(), &hb); err != nil {
			v.log.Warn("catalog: unreadable heartbeat ignored", "key", key, "error", err)
			return
		}
		if v.workers[ns] == nil {
			v.workers[ns] = map[string]heartbeat{}
		}
		var down map[string]string
		if len(hb.Down) > 0 {
			down = make(map[string]string, len(hb.Down))
			for _, d := range hb.Down {
				down[d.Source] = d.Reason
			}
		}
		// A source going down or coming back hides or shows its tools in
		// model views: caches keyed by ToolsVersion must see the change.
		if old, ok := v.workers[ns][id]; ok && !maps.Equal(old.down, down) || !ok && down != nil {
			v.toolsVersion++
		}
		v.workers[ns][id] = heartbeat{at: e.Created(), interval: time.Duration(hb.IntervalMS) * time.Millisecond, down: down}
	}
}

func splitKey(key, prefix string) (string, string, bool) {
	rest := key[len(prefix):]
	i := strings.IndexByte(rest, '.')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

func (v *View) bump() {
	v.mu.Lock()
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

// bucketStatus is what Sync asks of a bucket: jetstream.KeyValue has it.
type bucketStatus interface {
	Status(ctx context.Context) (jetstream.KeyValueStatus, error)
}

// Sync waits until the view holds every write the bucket had stored when
// it was called: a worker that registered its tools in another process,
// a tool switched off through another coordinator. It reads the bucket's
// last sequence (one request) and waits for the watch to pass it, until
// ctx ends; it returns ctx's error then, or the read's, and the view is
// as current as the watch made it either way.
func (v *View) Sync(ctx context.Context) error {
	b, ok := v.bucket.(bucketStatus)
	if !ok {
		return nil
	}
	st, err := b.Status(ctx)
	if err != nil {
		return fmt.Errorf("read the catalog's last write: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return nil
	}
	last := bs.StreamInfo().State.LastSeq
	for {
		v.mu.RLock()
		applied, changed := v.applied, v.changed
		v.mu.RUnlock()
		if applied >= last {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ToolsVersion increases with every change of a tool definition.
func (v *View) ToolsVersion() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.toolsVersion
}

// Changed returns a channel that is closed at the next change.
func (v *View) Changed() <-chan struct{} {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.changed
}

// Lookup returns a tool by canonical name.
func (v *View) Lookup(name string) (*Tool, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t, ok := v.tools[name]
	return t, ok
}

// Get returns a tool by canonical name. A tool missing from the view is
// read from the bucket, so that a tool registered a moment ago is found
// even before the watch delivers it.
func (v *View) Get(ctx context.Context, name messages.ToolName) (*Tool, bool, error) {
	if t, ok := v.Lookup(name.String()); ok {
		return t, true, nil
	}
	key, err := messages.ToolKey(name)
	if err != nil {
		return nil, false, err
	}
	e, err := v.bucket.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read catalog: %w", err)
	}
	v.apply(e)
	t, ok := v.Lookup(name.String())
	return t, ok, nil
}

// Tools returns every tool, sorted by name.
func (v *View) Tools() []*Tool {
	v.mu.RLock()
	out := make([]*Tool, 0, len(v.tools))
	for _, t := range v.tools {
		out = append(out, t)
	}
	v.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Tool) int { return strings.Compare(a.Definition.Name, b.Definition.Name) })
	return out
}

// Serving reports whether a live worker can run the tool now: one serves
// its namespace and, for a tool of a source, has not reported that source
// down. When none can, it says why.
func (v *View) Serving(def *messages.ToolDefinition) (bool, string) {
	now := v.now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.serving(now, def)
}

func (v *View) serving(now time.Time, def *messages.ToolDefinition) (bool, string) {
	ok, _, reason := v.servingState(now, def)
	return ok, reason
}

// ServingState is Serving, and also whether a live worker serves the
// tool's namespace (one whose source is down included), all under one
// read of the view: a caller deciding between "no worker yet" and "the
// workers cannot run it" sees one state, not a heartbeat that came
// between two reads.
func (v *View) ServingState(def *messages.ToolDefinition) (serving, live bool, reason string) {
	now := v.now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.servingState(now, def)
}

func (v *View) servingState(now time.Time, def *messages.ToolDefinition) (serving, live bool, reason string) {
	if v.servedAt(now, def.Namespace, def.Source.Name) {
		return true, true, ""
	}
	// Not served: why, from the live workers' reports of the source.
	why := ""
	for _, hb := range v.workers[def.Namespace] {
		if hb.aliveAt(now) {
			live, why = true, hb.down[def.Source.Name]
		}
	}
	if !live {
		return false, false, "no live worker serves namespace " + def.Namespace
	}
	return false, true, "source " + def.Source.Name + " is down: " + why
}

// ToolAvailable is Serving for a tool named; a tool the view does not
// hold is available when its namespace is.
func (v *View) ToolAvailable(name messages.ToolName) (bool, string) {
	now := v.now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	def := &messages.ToolDefinition{Namespace: name.Namespace}
	if t, ok := v.tools[name.String()]; ok {
		def = &t.Definition
	}
	return v.serving(now, def)
}

// Finder returns what a search asks of each of its candidates, each
// under one read of the view, at the time Finder was called: the tool as
// the view holds it (nil when the view does not hold it yet), and whether
// it may be found: not disabled, by itself or its namespace, and, unless
// includeUnavailable, served by a live worker (a tool the view does not
// hold is served when its namespace is). key is name's canonical form.
func (v *View) Finder(includeUnavailable bool) func(name messages.ToolName, key string) (*Tool, bool) {
	now := v.now()
	return func(name messages.ToolName, key string) (*Tool, bool) {
		v.mu.RLock()
		defer v.mu.RUnlock()
		if len(v.disabled) > 0 {
			if _, off := v.disabled[name.Namespace+"."+name.Method]; off {
				return nil, false
			}
			if _, off := v.disabled[name.Namespace]; off {
				return nil, false
			}
		}
		t := v.tools[key]
		if includeUnavailable {
			return t, true
		}
		source := ""
		if t != nil {
			source = t.Definition.Source.Name
		}
		return t, v.servedAt(now, name.Namespace, source)
	}
}

// servedAt reports whether a worker alive at now serves namespace ns and,
// for a tool of a source, has not reported that source down: Serving
// without its reason, which a search asks of each candidate.
func (v *View) servedAt(now time.Time, ns, source string) bool {
	for _, hb := range v.workers[ns] {
		if !hb.aliveAt(now) {
			continue
		}
		if _, down := hb.down[source]; source == "" || !down {
			return true
		}
	}
	return false
}

// Available reports whether a live worker serves the namespace.
func (v *View) Available(ns string) bool {
	now := v.now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, hb := range v.workers[ns] {
		if hb.aliveAt(now) {
			return true
		}
	}
	return false
}

// LiveWorkers counts the live workers of every namespace the catalog
// knows, by its tools or its workers' heartbeats (0 for a namespace
// without one).
func (v *View) LiveWorkers() map[string]int {
	now := v.now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make(map[string]int, len(v.workers))
	for _, t := range v.tools {
		out[t.Definition.Namespace] = 0
	}
	for ns, hbs := range v.workers {
		out[ns] = 0
		for _, hb := range hbs {
			if hb.aliveAt(now) {
				out[ns]++
			}
		}
	}
	return out
}

// Disabled reports whether an operator disabled the tool or its namespace, and why.
func (v *View) Disabled(name messages.ToolName) (bool, string) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.disabledLocked(name)
}

func (v *View) disabledLocked(name messages.ToolName) (bool, string) {
	if len(v.disabled) == 0 {
		return false, ""
	}
	if d, ok := v.disabled[name.Namespace+"."+name.Method]; ok {
		return true, d.Reason
	}
	if d, ok := v.disabled[name.Namespace]; ok {
		return true, "namespace " + name.Namespace + " disabled: " + d.Reason
	}
	return false, ""
}

// Entry returns the tool as the API lists it.
func (v *View) Entry(t *Tool) messages.ToolEntry {
	e := messages.ToolEntry{ToolDefinition: t.Definition}
	now := v.now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	e.Available, e.Unavailable = v.serving(now, &t.Definition)
	e.Disabled, e.Reason = v.disabledLocked(t.Definition.ToolName())
	return e
}
