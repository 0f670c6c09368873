package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/transport"
)

// kvBucket creates a bucket that republishes the headers of what it
// stores on changes, as the installation's catalog and index do.
func kvBucket(t *testing.T, name string, changes string) (jetstream.KeyValue, *jetstreamConn) {
	t.Helper()
	srv := testenv.Server(t)
	nc := testenv.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.KeyValueConfig{Bucket: name, History: 1}
	if changes != "" {
		cfg.RePublish = &jetstream.RePublish{Source: "$KV." + name + ".>", Destination: changes, HeadersOnly: true}
	}
	kv, err := js.CreateKeyValue(testenv.Context(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kv, &jetstreamConn{url: srv.URL()}
}

type jetstreamConn struct{ url string }

// next returns the watch's next entry, failing the test if the watch ends.
func next(t *testing.T, w jetstream.KeyWatcher) jetstream.KeyValueEntry {
	t.Helper()
	select {
	case e, ok := <-w.Updates():
		if !ok {
			t.Fatal("the watch ended")
		}
		return e
	case <-time.After(testenv.Patience):
		t.Fatalf("no entry within %v", testenv.Patience)
	}
	return nil
}

// WatchKV sends the current values, then nil, then each change: puts,
// deletes and purges, in the order they were stored, with their
// revisions; a watch of some keys sends only theirs. With the bucket's
// republished headers a change arrives at once; without them, at the
// next poll.
func TestWatchKV(t *testing.T) {
	t.Parallel()
	for _, republished := range []bool{true, false} {
		t.Run(fmt.Sprintf("republished=%v", republished), func(t *testing.T) {
			t.Parallel()
			changes, poll := "", 50*time.Millisecond
			if republished {
				changes, poll = "changes.watched.>", time.Hour
			}
			kv, conn := kvBucket(t, "watched", changes)
			ctx := testenv.Context(t)
			for i := range 300 { // more than one batch of reads
				if _, err := kv.Put(ctx, fmt.Sprintf("a.%03d", i), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := kv.Put(ctx, "b.1", []byte("b")); err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, "a.000", []byte("again")); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, "a.001"); err != nil {
				t.Fatal(err)
			}
			nc := testenv.Connect(t, conn.url)
			w, err := transport.WatchKV(ctx, nc, transport.KVWatchConfig{Bucket: "watched", Keys: "a.>", Changes: changes, Poll: poll})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			got := map[string]jetstream.KeyValueEntry{}
			var last uint64
			for e := next(t, w); e != nil; e = next(t, w) {
				if e.Revision() <= last {
					t.Fatalf("revision %d after %d", e.Revision(), last)
				}
				last = e.Revision()
				got[e.Key()] = e
			}
			if len(got) != 300 || string(got["a.000"].Value()) != "again" || got["a.001"].Operation() != jetstream.KeyValueDelete || got["b.1"] != nil {
				t.Fatalf("%d initial entries: a.000 %v, a.001 %v, b.1 %v", len(got), got["a.000"], got["a.001"], got["b.1"])
			}
			rev, err := kv.Put(ctx, "a.new", []byte("new"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, "b.2", []byte("not watched")); err != nil {
				t.Fatal(err)
			}
			if err := kv.Purge(ctx, "a.002"); err != nil {
				t.Fatal(err)
			}
			if e := next(t, w); e.Key() != "a.new" || string(e.Value()) != "new" || e.Revision() != rev || e.Operation() != jetstream.KeyValuePut {
				t.Fatalf("the put: %s %q %d %v", e.Key(), e.Value(), e.Revision(), e.Operation())
			}
			if e := next(t, w); e.Key() != "a.002" || e.Operation() != jetstream.KeyValuePurge {
				t.Fatalf("the purge: %s %v", e.Key(), e.Operation())
			}
			if err := w.Stop(); err != nil {
				t.Fatal(err)
			}
			if _, ok := <-w.Updates(); ok {
				t.Fatal("the watch sent after Stop")
			}
		})
	}
}

// A watch that keeps up reads each new message alone, so that the server
// counts no pending messages under its filter (a walk of every key), and
// a burst past a few messages in batches; every entry arrives once, in
// order, either way.
func TestWatchKVFollowsWithSingleReads(t *testing.T) {
	t.Parallel()
	kv, conn := kvBucket(t, "single", "changes.single.>")
	ctx := testenv.Context(t)
	for i := range 10 {
		if _, err := kv.Put(ctx, fmt.Sprintf("a.%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	const inbox = "_INBOX_watch_under_test"
	spy := testenv.Connect(t, conn.url)
	var mu sync.Mutex
	var batches, singles int
	if _, err := spy.Subscribe("$JS.API.DIRECT.GET.KV_single", func(m *nats.Msg) {
		if !strings.HasPrefix(m.Reply, inbox) {
			return
		}
		var req transport.BatchRequest
		_ = json.Unmarshal(m.Data, &req)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case req.Seq <= 10:
			// The read of the current values (the spy may see it late).
		case req.Batch > 0:
			batches++
		default:
			singles++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := testenv.Connect(t, conn.url, nats.CustomInboxPrefix(inbox))
	w, err := transport.WatchKV(ctx, nc, transport.KVWatchConfig{Bucket: "single", Keys: "a.>", Changes: "changes.single.>", Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	initial := 0
	for e := next(t, w); e != nil; e = next(t, w) {
		initial++
	}
	if initial != 10 {
		t.Fatalf("%d current values, want 10", initial)
	}
	for _, key := range []string{"a.new", "b.other", "a.next"} {
		if _, err := kv.Put(ctx, key, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"a.new", "a.next"} {
		if e := next(t, w); e.Key() != want {
			t.Fatalf("got %s, want %s", e.Key(), want)
		}
	}
	// The spy hears the reads on a connection of its own, which may deliver
	// them after the watcher had its answers.
	testenv.Eventually(t, "the spy to see the watcher's reads", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return singles > 0 || batches > 0
	})
	mu.Lock()
	if batches != 0 || singles == 0 {
		t.Errorf("keeping up: %d batched and %d single reads; want single reads only", batches, singles)
	}
	mu.Unlock()
	var want []string
	for i := range 100 {
		key := fmt.Sprintf("a.burst.%03d", i)
		want = append(want, key)
		if _, err := kv.Put(ctx, key, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var last uint64
	for len(got) < len(want) {
		e := next(t, w)
		if e.Revision() <= last {
			t.Fatalf("revision %d after %d", e.Revision(), last)
		}
		last = e.Revision()
		got = append(got, e.Key())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the burst: %v", got)
	}
}

// ListKV lists the keys that hold a value, in the order they were first
// stored, without those deleted or purged.
func TestListKV(t *testing.T) {
	t.Parallel()
	kv, conn := kvBucket(t, "listed", "")
	ctx := testenv.Context(t)
	for _, k := range []string{"c.1", "c.2", "d.1", "c.3"} {
		if _, err := kv.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "c.2"); err != nil {
		t.Fatal(err)
	}
	keys, err := transport.ListKV(ctx, testenv.Connect(t, conn.url), "listed", "c.>")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c.1", "c.3"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	if keys, err := transport.ListKV(ctx, testenv.Connect(t, conn.url), "listed", "none.>"); err != nil || len(keys) != 0 {
		t.Fatalf("no keys: %v %v", keys, err)
	}
}

// A watch of a bucket that does not exist fails, once its context ends
// (a stream that does not answer may be electing a leader).
func TestWatchKVOfNoBucket(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	ctx, cancel := context.WithTimeout(testenv.Context(t), 300*time.Millisecond)
	defer cancel()
	if w, err := transport.WatchKV(ctx, testenv.Connect(t, srv.URL()), transport.KVWatchConfig{Bucket: "missing"}); err == nil {
		_ = w.Stop()
		t.Fatal("a watch of a bucket that does not exist")
	}
}
