package indexer

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// followed is a key-value bucket the indexer reads and watches without
// consumers: nats.go's watches and key listings create one, and a user
// that may create a consumer names where the stream delivers, a subject
// another role's data is stored on included (docs/security.md). Its
// watches and listings read the bucket's messages by direct get instead
// (transport.WatchKV, transport.ListKV), woken by the headers the
// bucket's stream republishes on names.BucketChanges; everything else is
// the bucket's own. Watch options are not supported.
type followed struct {
	jetstream.KeyValue
	nc    *nats.Conn
	names messages.Names
}

func (b followed) Watch(ctx context.Context, keys string, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return transport.WatchKV(ctx, b.nc, transport.KVWatchConfig{
		Bucket:  b.Bucket(),
		Keys:    keys,
		Changes: b.names.BucketChanges(b.Bucket(), keys),
	})
}

func (b followed) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return b.Watch(ctx, ">", opts...)
}

func (b followed) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	var keys []string
	for _, f := range filters {
		got, err := transport.ListKV(ctx, b.nc, b.Bucket(), f)
		if err != nil {
			return nil, err
		}
		keys = append(keys, got...)
	}
	return newKeyList(keys), nil
}

func (b followed) ListKeys(ctx context.Context, _ ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return b.ListKeysFiltered(ctx, ">")
}

// keyList is a listing read in full.
type keyList struct{ keys chan string }

func newKeyList(keys []string) keyList {
	l := keyList{keys: make(chan string, len(keys))}
	for _, k := range keys {
		l.keys <- k
	}
	close(l.keys)
	return l
}

func (l keyList) Keys() <-chan string { return l.keys }
func (l keyList) Stop() error         { return nil }

// catalogKeys are the catalog's keys the index is built from: the tools'
// definitions and the switches that disable them. The workers'
// heartbeats and the coordinators' leases, written every few seconds, are
// not followed: each would wake the watch for a read that walks the keys
// under its filter.
var catalogKeys = []string{"tools.>", "disabled.>"}

// indexedCatalog is the catalog bucket as the indexer follows it: its
// WatchAll follows catalogKeys only.
type indexedCatalog struct{ followed }

func (b indexedCatalog) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	var watches []jetstream.KeyWatcher
	for _, keys := range catalogKeys {
		w, err := b.Watch(ctx, keys, opts...)
		if err != nil {
			for _, w := range watches {
				_ = w.Stop()
			}
			return nil, err
		}
		watches = append(watches, w)
	}
	return mergeWatches(watches), nil
}

// mergedWatch is watches of disjoint keys as one: their current values,
// then one nil once each has sent its own, then their updates; its
// updates end when every watch's have.
type mergedWatch struct {
	watches  []jetstream.KeyWatcher
	updates  chan jetstream.KeyValueEntry
	stop     chan struct{}
	stopOnce sync.Once
}

func mergeWatches(watches []jetstream.KeyWatcher) *mergedWatch {
	m := &mergedWatch{watches: watches, updates: make(chan jetstream.KeyValueEntry, 256), stop: make(chan struct{})}
	// loaded carries, for each watch, whether it sent its current values
	// (false: it ended first).
	loaded := make(chan bool, len(watches))
	var senders sync.WaitGroup
	for _, w := range watches {
		senders.Go(func() { m.forward(w, loaded) })
	}
	senders.Go(func() {
		for range watches {
			if ok := <-loaded; !ok {
				return
			}
		}
		select {
		case m.updates <- nil:
		case <-m.stop:
		}
	})
	go func() {
		senders.Wait()
		close(m.updates)
	}()
	return m
}

// forward passes one watch's entries on until it or the merged watch
// ends, telling loaded once it sent its current values or ended.
func (m *mergedWatch) forward(w jetstream.KeyWatcher, loaded chan<- bool) {
	told := false
	defer func() {
		if !told {
			loaded <- false
		}
	}()
	for {
		var e jetstream.KeyValueEntry
		select {
		case got, ok := <-w.Updates():
			if !ok {
				return
			}
			if got == nil {
				if !told {
					told = true
					loaded <- true
				}
				continue
			}
			e = got
		case <-m.stop:
			return
		}
		select {
		case m.updates <- e:
		case <-m.stop:
			return
		}
	}
}

func (m *mergedWatch) Updates() <-chan jetstream.KeyValueEntry { return m.updates }

func (m *mergedWatch) Stop() error {
	var first error
	m.stopOnce.Do(func() {
		close(m.stop)
		for _, w := range m.watches {
			if err := w.Stop(); err != nil && first == nil {
				first = err
			}
		}
	})
	return first
}
