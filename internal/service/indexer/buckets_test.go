package indexer

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// fakeWatch is a KeyWatcher fed by the test.
type fakeWatch struct {
	updates chan jetstream.KeyValueEntry
	stopped bool
}

func (w *fakeWatch) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w *fakeWatch) Stop() error                             { w.stopped = true; return nil }

type fakeEntry struct {
	jetstream.KeyValueEntry
	key string
}

func (e fakeEntry) Key() string { return e.key }

// The merged watch sends both watches' current values before its one nil,
// their updates after, and ends once both end; a watch that ends before
// its current values makes no nil.
func TestMergedWatch(t *testing.T) {
	a := &fakeWatch{updates: make(chan jetstream.KeyValueEntry, 8)}
	b := &fakeWatch{updates: make(chan jetstream.KeyValueEntry, 8)}
	m := mergeWatches([]jetstream.KeyWatcher{a, b})
	a.updates <- fakeEntry{key: "tools.a"}
	a.updates <- nil
	a.updates <- fakeEntry{key: "tools.live"}
	b.updates <- fakeEntry{key: "disabled.b"}
	b.updates <- nil
	var before []string
	for e := range m.Updates() {
		if e == nil {
			break
		}
		before = append(before, e.Key())
	}
	if !slices.Contains(before, "tools.a") || !slices.Contains(before, "disabled.b") {
		t.Fatalf("before the nil: %v; want both watches' current values", before)
	}
	b.updates <- fakeEntry{key: "disabled.later"}
	close(a.updates)
	close(b.updates)
	var after []string
	for e := range m.Updates() {
		if e == nil {
			t.Fatal("a second nil")
		}
		after = append(after, e.Key())
	}
	if !slices.Contains(append(before, after...), "tools.live") || !slices.Contains(after, "disabled.later") {
		t.Errorf("after the nil: %v (before %v)", after, before)
	}
	if err := m.Stop(); err != nil || !a.stopped || !b.stopped {
		t.Errorf("stop: %v, stopped %v %v", err, a.stopped, b.stopped)
	}
	if err := m.Stop(); err != nil {
		t.Errorf("a second stop: %v", err)
	}

	c := &fakeWatch{updates: make(chan jetstream.KeyValueEntry, 8)}
	d := &fakeWatch{updates: make(chan jetstream.KeyValueEntry, 8)}
	m = mergeWatches([]jetstream.KeyWatcher{c, d})
	c.updates <- nil
	close(d.updates)
	close(c.updates)
	for e := range m.Updates() {
		if e == nil {
			t.Fatal("a nil, though one watch ended before its current values")
		}
	}
}
