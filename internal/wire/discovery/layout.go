package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Keys of the index bucket.
const (
	// ManifestKey holds the Manifest of the current version, as JSON.
	ManifestKey = "manifest"
	// LeaseKey holds the lease of the indexer that writes.
	LeaseKey = "lease"
	// ChunksFilter matches the keys of every version's chunks.
	ChunksFilter = "v.>"
)

// DefaultChunkSize is the size of every chunk of a stored version but the
// last: half of the 1 MiB that a NATS message may hold by default.
const DefaultChunkSize = 512 << 10

// maxStoredSize bounds the size a manifest may announce, so that a damaged
// manifest cannot make a reader allocate without limit.
const maxStoredSize = 1 << 32

// ChunkKey is the key of chunk n, from 0, of an index version: "v.<version>.<n>".
func ChunkKey(version uint64, n int) string {
	return "v." + strconv.FormatUint(version, 10) + "." + strconv.Itoa(n)
}

// ParseChunkKey reads the version and chunk number out of a ChunkKey.
func ParseChunkKey(key string) (version uint64, n int, ok bool) {
	rest, found := strings.CutPrefix(key, "v.")
	if !found {
		return 0, 0, false
	}
	v, c, found := strings.Cut(rest, ".")
	if !found {
		return 0, 0, false
	}
	version, err1 := strconv.ParseUint(v, 10, 64)
	n, err2 := strconv.Atoi(c)
	if err1 != nil || err2 != nil || n < 0 || ChunkKey(version, n) != key {
		return 0, 0, false
	}
	return version, n, true
}

// Manifest describes the current stored version. The indexer that holds
// the lease moves it by compare-and-set once every chunk is written, so a
// reader that finds a manifest finds all of its chunks, for at least the
// indexer's grace period after a newer version replaced it.
type Manifest struct {
	// Version numbers the stored versions: 1 for the first, one more for each next.
	Version uint64 `json:"version"`
	// Format is the SnapshotFormat of the stored bytes.
	Format int `json:"format"`
	// Chunks is how many chunks hold the version: keys ChunkKey(Version, 0..Chunks-1).
	Chunks int `json:"chunks"`
	// ChunkSize is the size of every chunk but the last, which holds the rest.
	ChunkSize int `json:"chunk_size"`
	// Size is the size of the whole encoded snapshot.
	Size int64 `json:"size"`
	// Digest is "sha256:" and the hex SHA-256 of the encoded snapshot.
	Digest string `json:"digest"`
	// Fingerprint identifies what the index answers (see Tracker.Fingerprint):
	// a reader whose own index has the same fingerprint need not load it.
	Fingerprint string `json:"fingerprint"`
	// Tools is the number of tools indexed.
	Tools int `json:"tools"`
	// CatalogRevision is the highest catalog KV revision among the indexed
	// definitions: the newest definition the version reflects.
	CatalogRevision uint64 `json:"catalog_revision"`
	// WrittenAt is when the writer moved the manifest to this version.
	WrittenAt time.Time `json:"written_at"`
	// Writer is the ID of the indexer that wrote the version.
	Writer string `json:"writer"`
}

// Validate reports the first field that cannot describe a stored version.
func (m *Manifest) Validate() error {
	switch {
	case m.Version == 0:
		return errors.New("manifest: version is 0")
	case m.Format != SnapshotFormat:
		return fmt.Errorf("manifest: format %d is not supported; this release reads format %d", m.Format, SnapshotFormat)
	case m.ChunkSize <= 0:
		return fmt.Errorf("manifest: chunk size %d is not positive", m.ChunkSize)
	case m.Size <= 0 || m.Size > maxStoredSize:
		return fmt.Errorf("manifest: size %d is out of range 1..%d", m.Size, int64(maxStoredSize))
	case m.Chunks != chunkCount(m.Size, m.ChunkSize):
		return fmt.Errorf("manifest: %d chunks of %d bytes cannot hold %d bytes exactly", m.Chunks, m.ChunkSize, m.Size)
	}
	if hexDigest, ok := strings.CutPrefix(m.Digest, "sha256:"); !ok || len(hexDigest) != 2*sha256.Size {
		return fmt.Errorf("manifest: digest %q is not \"sha256:\" and 64 hex digits", m.Digest)
	} else if _, err := hex.DecodeString(hexDigest); err != nil {
		return fmt.Errorf("manifest: digest %q is not \"sha256:\" and 64 hex digits", m.Digest)
	}
	return nil
}

func chunkCount(size int64, chunkSize int) int {
	return int((size + int64(chunkSize) - 1) / int64(chunkSize))
}

// Digest returns the manifest digest of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DecodeManifest reads a manifest as stored under ManifestKey and validates it.
func DecodeManifest(data []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest: %w", err)
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Bucket is the part of the index bucket a reader uses; jetstream.KeyValue
// satisfies it.
type Bucket interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

// ErrNoIndex means that no indexer has stored an index yet.
var ErrNoIndex = errors.New("no discovery index stored")

// ReadManifest returns the current manifest and its KV revision, or an
// error matching ErrNoIndex when there is none.
func ReadManifest(ctx context.Context, b Bucket) (Manifest, uint64, error) {
	e, err := b.Get(ctx, ManifestKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Manifest{}, 0, ErrNoIndex
	}
	if err != nil {
		return Manifest{}, 0, fmt.Errorf("read index manifest: %w", err)
	}
	m, err := DecodeManifest(e.Value())
	if err != nil {
		return Manifest{}, 0, fmt.Errorf("read index manifest: %w", err)
	}
	return m, e.Revision(), nil
}

// Split cuts data into chunks of size bytes, the last one shorter. The
// chunks share data's memory.
func Split(data []byte, size int) [][]byte {
	chunks := make([][]byte, 0, chunkCount(int64(len(data)), size))
	for len(data) > size {
		chunks = append(chunks, data[:size:size])
		data = data[size:]
	}
	return append(chunks, data)
}

// fetchParallelism bounds the chunk reads in flight: enough to hide the
// round trips, few enough not to crowd a server.
const fetchParallelism = 8

// Fetch reads the chunks of the version m describes, checks their sizes and
// the digest, and returns the encoded snapshot. A chunk that is gone (the
// version was superseded longer than the grace period ago) is an error
// matching jetstream.ErrKeyNotFound; damage is an error matching ErrCorrupt.
func Fetch(ctx context.Context, b Bucket, m Manifest) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	data := make([]byte, m.Size)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     = make(chan int)
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	for range min(fetchParallelism, m.Chunks) {
		wg.Go(func() {
			for n := range next {
				start := int64(n) * int64(m.ChunkSize)
				end := min(start+int64(m.ChunkSize), m.Size)
				e, err := b.Get(ctx, ChunkKey(m.Version, n))
				if err != nil {
					fail(fmt.Errorf("index version %d: chunk %d of %d: %w", m.Version, n, m.Chunks, err))
					continue
				}
				if int64(len(e.Value())) != end-start {
					fail(fmt.Errorf("%w: index version %d: chunk %d holds %d bytes; want %d", ErrCorrupt, m.Version, n, len(e.Value()), end-start))
					continue
				}
				copy(data[start:end], e.Value())
			}
		})
	}
	for n := range m.Chunks {
		select {
		case next <- n:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("index version %d: %w", m.Version, err)
	}
	if d := Digest(data); d != m.Digest {
		return nil, fmt.Errorf("%w: index version %d: digest %s; the manifest says %s", ErrCorrupt, m.Version, d, m.Digest)
	}
	return data, nil
}

// Load fetches the version m describes and decodes it.
func Load(ctx context.Context, b Bucket, m Manifest) (*Snapshot, error) {
	data, err := Fetch(ctx, b, m)
	if err != nil {
		return nil, err
	}
	s, err := DecodeSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("index version %d: %w", m.Version, err)
	}
	return s, nil
}
