package discovery_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// snapshotOf returns the encoded index of the catalog as it is now, and its fingerprint.
func snapshotOf(t testing.TB, b *bundle) ([]byte, string) {
	t.Helper()
	tr := newTracker(t, b, search.Config{})
	mustSync(t, tr)
	return tr.Snapshot().Encode(), tr.Fingerprint()
}

// TestIndexWithoutStoredVersion builds from the catalog, then loads the
// first version stored, and takes a later one that answers alike without
// loading it.
func TestIndexWithoutStoredVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, tool("files", "read_file", "Reads a file from the disk."))
	x := b.discovery(t, nil)
	if st := x.Status(); st.Version != 0 || st.Loads != 0 || st.Tools != 1 || st.Err != nil {
		t.Fatalf("status without a stored version: %+v", st)
	}
	if got := top(t, x, "file disk", 5); !slices.Equal(got, []string{"files-read_file"}) {
		t.Fatalf("built from the catalog: %v", got)
	}

	b.put(t, tool("web", "fetch_page", "Downloads a web page."))
	data, fingerprint := snapshotOf(t, b)
	// Another fingerprint than the index in use, whether or not it already
	// has the new tool: version 1 is loaded.
	b.storeVersion(t, 1, data, "sha256:other")
	awaitIndex(t, x, "version 1 loaded", func() bool { return x.Status().Loads == 1 })
	st := x.Status()
	if st.Version != 1 || st.Bytes != int64(len(data)) || st.LoadTime() <= 0 || st.Tools != 2 || st.Err != nil {
		t.Fatalf("after loading version 1: %+v", st)
	}
	if got := top(t, x, "web page", 5); !slices.Equal(got, []string{"web-fetch_page"}) {
		t.Fatalf("after loading: %v", got)
	}

	b.storeVersion(t, 2, data, fingerprint)
	awaitIndex(t, x, "version 2 taken as is", func() bool { return x.Status().Version == 2 })
	if st := x.Status(); st.Loads != 1 {
		t.Fatalf("a version that answers like the index in use was loaded: %+v", st)
	}
}

// TestIndexFallsBackFromDamage: a stored version with a damaged or missing
// chunk is not used; the index is built from the catalog, and the status
// says why.
func TestIndexFallsBackFromDamage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, b *bundle, m discovery.Manifest)
		want   error
	}{
		{"changed byte", func(t *testing.T, b *bundle, m discovery.Manifest) {
			e, err := b.bucket.Get(testenv.Context(t), discovery.ChunkKey(m.Version, 0))
			if err != nil {
				t.Fatal(err)
			}
			v := slices.Clone(e.Value())
			v[len(v)/2] ^= 0x20
			if _, err := b.bucket.Put(testenv.Context(t), discovery.ChunkKey(m.Version, 0), v); err != nil {
				t.Fatal(err)
			}
		}, discovery.ErrCorrupt},
		{"chunk gone", func(t *testing.T, b *bundle, m discovery.Manifest) {
			if err := b.bucket.Purge(testenv.Context(t), discovery.ChunkKey(m.Version, 0)); err != nil {
				t.Fatal(err)
			}
		}, jetstream.ErrKeyNotFound},
		{"bytes that are no index", func(t *testing.T, b *bundle, m discovery.Manifest) {
			b.storeVersion(t, m.Version+1, []byte("TBIX\x01\x05garbage"), "")
		}, discovery.ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.put(t, tool("files", "read_file", "Reads a file from the disk."))
			data, fingerprint := snapshotOf(t, b)
			m := b.storeVersion(t, 1, data, fingerprint)
			c.damage(t, b, m)
			b.put(t, tool("web", "fetch_page", "Downloads a web page."))
			x := b.discovery(t, nil)
			st := x.Status()
			if st.Version != 0 || st.Loads != 0 || !errors.Is(st.Err, c.want) {
				t.Fatalf("status %+v; want an error matching %v", st, c.want)
			}
			if got := top(t, x, "", 5); !slices.Equal(got, []string{"files-read_file", "web-fetch_page"}) {
				t.Fatalf("built from the catalog: %v", got)
			}
		})
	}
}

// TestIndexSwapKeepsNewerChanges: a stored version older than what the
// index already shows (a tool added, one disabled, a description changed
// since) is swapped in without undoing any of it.
func TestIndexSwapKeepsNewerChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t,
		tool("files", "read_file", "Reads a file from the disk."),
		tool("files", "write_file", "Writes a file to the disk."),
	)
	stale, _ := snapshotOf(t, b)
	x := b.discovery(t, nil)

	b.put(t, tool("mail", "send_mail", "Sends an email."), tool("files", "read_file", "Opens a document."))
	b.disable(t, "files", "write_file")
	awaitIndex(t, x, "the changes", func() bool {
		return slices.Equal(top(t, x, "", 10), []string{"files-read_file", "mail-send_mail"})
	})

	b.storeVersion(t, 7, stale, "sha256:stale")
	awaitIndex(t, x, "version 7 loaded", func() bool { return x.Status().Loads == 1 })
	if st := x.Status(); st.Version != 7 || st.Tools != 2 {
		t.Fatalf("status %+v", st)
	}
	if got := top(t, x, "", 10); !slices.Equal(got, []string{"files-read_file", "mail-send_mail"}) {
		t.Fatalf("after swapping in the stale version: %v", got)
	}
	if got := top(t, x, "document", 10); !slices.Equal(got, []string{"files-read_file"}) {
		t.Fatalf("the new description is lost: %v", got)
	}
}

// TestIndexSearchFilters: disabled tools never show, and tools of
// namespaces without a live worker show only when asked for.
func TestIndexSearchFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, tool("files", "read_file", "Reads a file."), tool("files", "write_file", "Writes a file."))
	live := b.discovery(t, func(c *discovery.Config) { c.IncludeUnavailable = false; c.Bucket = nil })
	all := b.discovery(t, nil)
	if got := top(t, live, "file", 10); len(got) != 0 {
		t.Fatalf("tools without a worker: %v", got)
	}
	hb := messages.WorkerHeartbeat{WorkerID: "w1", Namespace: "files", Slots: 1, Time: time.Now(), IntervalMS: time.Minute.Milliseconds()}
	if err := b.store.Heartbeat(testenv.Context(t), &hb); err != nil {
		t.Fatal(err)
	}
	b.await(t, "the heartbeat", func() bool { return b.view.Available("files") })
	if got := top(t, live, "", 10); !slices.Equal(got, []string{"files-read_file", "files-write_file"}) {
		t.Fatalf("with a live worker: %v", got)
	}

	// The switch hides the tool as soon as the view has it, even before
	// the index drops it.
	b.disable(t, "files", "write_file")
	for _, x := range []*discovery.Index{live, all} {
		if got := top(t, x, "write", 10); len(got) != 0 {
			t.Fatalf("a disabled tool found: %v", got)
		}
	}
	// A caller's own filter still applies.
	res, err := all.Search(search.Query{Allow: func(n messages.ToolName) bool { return n.Method != "read_file" }})
	if err != nil || len(res.Hits) != 0 {
		t.Fatalf("with the caller's filter: %+v, %v", res, err)
	}
}
