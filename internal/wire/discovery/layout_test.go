package discovery_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

func TestChunkKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		version uint64
		n       int
	}{{1, 0}, {7, 12}, {1 << 40, 3}} {
		key := discovery.ChunkKey(c.version, c.n)
		v, n, ok := discovery.ParseChunkKey(key)
		if !ok || v != c.version || n != c.n {
			t.Errorf("ParseChunkKey(%q) = %d, %d, %v", key, v, n, ok)
		}
	}
	for _, key := range []string{"v.1", "v.01.0", "v.1.00", "v.1.-1", "x.1.0", "v.1.0.2", "v..0", "manifest", "lease"} {
		if _, _, ok := discovery.ParseChunkKey(key); ok {
			t.Errorf("ParseChunkKey(%q) accepted", key)
		}
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789"), 10)
	for _, c := range []struct {
		size  int
		sizes []int
	}{
		{size: 100, sizes: []int{100}},
		{size: 1000, sizes: []int{100}},
		{size: 30, sizes: []int{30, 30, 30, 10}},
		{size: 50, sizes: []int{50, 50}},
	} {
		chunks := discovery.Split(data, c.size)
		var sizes []int
		for _, ch := range chunks {
			sizes = append(sizes, len(ch))
		}
		if !slices.Equal(sizes, c.sizes) || !bytes.Equal(bytes.Join(chunks, nil), data) {
			t.Errorf("Split(100 bytes, %d) = chunks of %v", c.size, sizes)
		}
	}
}

func validManifest() discovery.Manifest {
	return discovery.Manifest{
		Version:   3,
		Format:    discovery.SnapshotFormat,
		Chunks:    3,
		ChunkSize: 100,
		Size:      250,
		Digest:    discovery.Digest([]byte("x")),
	}
}

func TestManifestValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		mutate func(*discovery.Manifest)
		want   string // in the error; "" for none
	}{
		{"valid", func(*discovery.Manifest) {}, ""},
		{"last chunk full", func(m *discovery.Manifest) { m.Size = 300 }, ""},
		{"version 0", func(m *discovery.Manifest) { m.Version = 0 }, "version is 0"},
		{"future format", func(m *discovery.Manifest) { m.Format = 99 }, "format 99"},
		{"too few chunks", func(m *discovery.Manifest) { m.Size = 301 }, "cannot hold"},
		{"too many chunks", func(m *discovery.Manifest) { m.Size = 200 }, "cannot hold"},
		{"no size", func(m *discovery.Manifest) { m.Size = 0 }, "size 0"},
		{"huge", func(m *discovery.Manifest) { m.Size = 1 << 40 }, "out of range"},
		{"no chunk size", func(m *discovery.Manifest) { m.ChunkSize = 0 }, "chunk size 0"},
		{"md5 digest", func(m *discovery.Manifest) { m.Digest = "md5:abc" }, "digest"},
		{"short digest", func(m *discovery.Manifest) { m.Digest = "sha256:abc" }, "digest"},
		{"not hex", func(m *discovery.Manifest) { m.Digest = "sha256:" + strings.Repeat("z", 64) }, "digest"},
	} {
		m := validManifest()
		c.mutate(&m)
		err := m.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: Validate() = %v; want %q", c.name, err, c.want)
		}
	}
}

func TestManifestRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := validManifest()
	m.Fingerprint, m.Tools, m.CatalogRevision, m.Writer = "sha256:ff", 4, 9, "indexer-1"
	b.putManifest(t, m)
	got, rev, err := discovery.ReadManifest(testenv.Context(t), b.bucket)
	if err != nil || rev == 0 || got != m {
		t.Fatalf("ReadManifest = %+v, %d, %v; want %+v", got, rev, err, m)
	}
	if _, err := discovery.DecodeManifest([]byte(`{"version":1}`)); err == nil {
		t.Fatal("a manifest without chunks decoded")
	}
	if _, err := discovery.DecodeManifest([]byte(`[`)); err == nil {
		t.Fatal("bad JSON decoded")
	}
}

func testSnapshot(t testing.TB) *discovery.Snapshot {
	t.Helper()
	defs := []messages.ToolDefinition{
		tool("files", "read_file", "Reads a file from the disk."),
		tool("files", "write_file", "Writes a file to the disk."),
		tool("web", "fetch_page", "Downloads a web page. 下载网页。"),
	}
	ix, err := search.Build(search.Config{}, defs)
	if err != nil {
		t.Fatal(err)
	}
	return &discovery.Snapshot{Index: ix, Revisions: map[string]uint64{"files-read_file": 3, "files-write_file": 17, "web-fetch_page": 1 << 40}}
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	s := testSnapshot(t)
	data := s.Encode()
	got, err := discovery.DecodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	for name, rev := range s.Revisions {
		if got.Revisions[name] != rev {
			t.Errorf("revision of %s: %d; want %d", name, got.Revisions[name], rev)
		}
	}
	if len(got.Revisions) != len(s.Revisions) {
		t.Errorf("revisions %v", got.Revisions)
	}
	for _, q := range []string{"file disk", "web page", "files-write_file", ""} {
		if a, b := top(t, s.Index, q, 10), top(t, got.Index, q, 10); !slices.Equal(a, b) {
			t.Errorf("query %q: %v before, %v after", q, a, b)
		}
	}
	if again := got.Encode(); !bytes.Equal(again, data) {
		t.Error("encoding a decoded snapshot gives other bytes")
	}
}

func TestDecodeSnapshotRejects(t *testing.T) {
	t.Parallel()
	data := testSnapshot(t).Encode()
	// The revisions section of three tools, as Encode writes it.
	header := func(format uint64, entries ...any) []byte {
		b := []byte("TBIX")
		b = binary.AppendUvarint(b, format)
		b = binary.AppendUvarint(b, uint64(len(entries)/2))
		prev := ""
		for i := 0; i < len(entries); i += 2 {
			name := entries[i].(string)
			shared := 0
			for shared < min(len(prev), len(name)) && prev[shared] == name[shared] {
				shared++
			}
			b = binary.AppendUvarint(b, uint64(shared))
			b = binary.AppendUvarint(b, uint64(len(name)-shared))
			b = append(b, name[shared:]...)
			b = binary.AppendUvarint(b, entries[i+1].(uint64))
			prev = name
		}
		return b
	}
	s := testSnapshot(t)
	body := s.Index.Encode()
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"other magic", append([]byte("TBSI"), data[4:]...)},
		{"truncated", data[:len(data)-3]},
		{"trailing byte", append(slices.Clone(data), 0)},
		{"future format", append(header(2, "files-read_file", uint64(1), "files-write_file", uint64(1), "web-fetch_page", uint64(1)), body...)},
		{"a revision too few", append(header(1, "files-read_file", uint64(1), "web-fetch_page", uint64(1)), body...)},
		{"a tool not indexed", append(header(1, "files-read_file", uint64(1), "files-zap", uint64(1), "web-fetch_page", uint64(1)), body...)},
		{"out of order", append(header(1, "web-fetch_page", uint64(1), "files-read_file", uint64(1), "files-write_file", uint64(1)), body...)},
		{"count beyond the data", header(1, "a-b", uint64(1))[:6]},
	} {
		if _, err := discovery.DecodeSnapshot(c.data); !errors.Is(err, discovery.ErrCorrupt) {
			t.Errorf("%s: DecodeSnapshot error %v; want ErrCorrupt", c.name, err)
		}
	}
	if _, err := discovery.DecodeSnapshot(append(header(1, "files-read_file", uint64(1), "files-write_file", uint64(1), "web-fetch_page", uint64(1)), body...)); err != nil {
		t.Fatalf("the hand-made snapshot itself: %v", err)
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(testSnapshot(f).Encode())
	empty, _ := search.New(search.Config{})
	f.Add((&discovery.Snapshot{Index: empty, Revisions: map[string]uint64{}}).Encode())
	f.Add([]byte("TBIX\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := discovery.DecodeSnapshot(data)
		if err != nil {
			if !errors.Is(err, discovery.ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if s.Index.Len() != len(s.Revisions) {
			t.Fatalf("%d tools, %d revisions", s.Index.Len(), len(s.Revisions))
		}
		if _, err := s.Index.Search(search.Query{Text: "file page"}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFetchChecksEveryChunk: a chunk gone, a chunk of the wrong size and a
// chunk with other bytes are each refused with an error that says which.
func TestFetchChecksEveryChunk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testenv.Context(t)
	data := bytes.Repeat([]byte("toolbus!"), discovery.DefaultChunkSize/4) // two chunks
	m := b.storeVersion(t, 1, data, "")
	got, err := discovery.Fetch(ctx, b.bucket, m)
	if err != nil || !bytes.Equal(got, data) || m.Chunks != 2 {
		t.Fatalf("Fetch of %d chunks: %d bytes, %v", m.Chunks, len(got), err)
	}

	if _, err := b.bucket.Put(ctx, discovery.ChunkKey(1, 1), []byte("short")); err != nil {
		t.Fatal(err)
	}
	if _, err := discovery.Fetch(ctx, b.bucket, m); !errors.Is(err, discovery.ErrCorrupt) || !strings.Contains(err.Error(), "chunk 1") {
		t.Fatalf("a short chunk: %v", err)
	}
	other := slices.Clone(data[discovery.DefaultChunkSize:])
	other[0] ^= 1
	if _, err := b.bucket.Put(ctx, discovery.ChunkKey(1, 1), other); err != nil {
		t.Fatal(err)
	}
	if _, err := discovery.Fetch(ctx, b.bucket, m); !errors.Is(err, discovery.ErrCorrupt) || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("a changed byte: %v", err)
	}
	if err := b.bucket.Purge(ctx, discovery.ChunkKey(1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := discovery.Fetch(ctx, b.bucket, m); !errors.Is(err, jetstream.ErrKeyNotFound) || !strings.Contains(err.Error(), "chunk 0 of 2") {
		t.Fatalf("a chunk gone: %v", err)
	}
	if _, err := discovery.Load(ctx, b.bucket, m); err == nil {
		t.Fatal("Load of a version with a chunk gone")
	}
}
