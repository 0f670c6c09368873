package discovery

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// SnapshotFormat is the version of the snapshot encoding that this release
// writes and reads; the manifest carries it.
const SnapshotFormat = 1

const snapshotMagic = "TBIX"

// ErrCorrupt is matched by every error that says a stored index is
// damaged: a digest or size that does not match its manifest, or bytes
// that do not decode.
var ErrCorrupt = errors.New("stored discovery index is corrupt")

// Snapshot is one index version as the indexer stores it: the search
// index, and the catalog revision of each definition it indexed, by
// canonical name. The revisions let a reader bring a stored version up to
// date with its own view of the catalog by re-indexing only the tools whose
// revision differs.
type Snapshot struct {
	Index     *search.Index
	Revisions map[string]uint64
}

// Encode returns the snapshot in its stored form: the magic "TBIX", the
// format version and the count of tools as uvarints, the tools' canonical
// names in increasing order (each as the length of the prefix it shares
// with the previous one, then the rest) with their revisions, then the
// search index as search.Index.Encode writes it. The index must not change
// during the call.
func (s *Snapshot) Encode() []byte {
	names := slices.Sorted(maps.Keys(s.Revisions))
	b := make([]byte, 0, 64+len(names)*24)
	b = append(b, snapshotMagic...)
	b = binary.AppendUvarint(b, SnapshotFormat)
	b = binary.AppendUvarint(b, uint64(len(names)))
	prev := ""
	for _, name := range names {
		shared := commonPrefix(prev, name)
		b = binary.AppendUvarint(b, uint64(shared))
		b = binary.AppendUvarint(b, uint64(len(name)-shared))
		b = append(b, name[shared:]...)
		b = binary.AppendUvarint(b, s.Revisions[name])
		prev = name
	}
	return append(b, s.Index.Encode()...)
}

// DecodeSnapshot reads what Encode wrote. Every error it returns matches
// ErrCorrupt.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	fail := func(format string, args ...any) (*Snapshot, error) {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if !bytes.HasPrefix(data, []byte(snapshotMagic)) {
		return fail("missing the %q header", snapshotMagic)
	}
	off := len(snapshotMagic)
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(data[off:])
		if n <= 0 {
			return 0, false
		}
		off += n
		return v, true
	}
	format, ok := uvarint()
	if !ok {
		return fail("bad format version")
	}
	if format != SnapshotFormat {
		return fail("format %d is not supported; this release reads format %d", format, SnapshotFormat)
	}
	count, ok := uvarint()
	// A tool takes at least 3 bytes: prefix length, suffix length, revision.
	if !ok || count > uint64(len(data)-off)/3 {
		return fail("bad tool count")
	}
	revisions := make(map[string]uint64, count)
	prev := ""
	for i := range count {
		shared, ok1 := uvarint()
		suffix, ok2 := uvarint()
		if !ok1 || !ok2 || shared > uint64(len(prev)) || suffix > uint64(len(data)-off) {
			return fail("bad name of tool %d at byte %d", i, off)
		}
		name := prev[:shared] + string(data[off:off+int(suffix)])
		off += int(suffix)
		if i > 0 && name <= prev {
			return fail("tool %q is out of order", name)
		}
		rev, ok := uvarint()
		if !ok {
			return fail("bad revision of tool %q", name)
		}
		revisions[name] = rev
		prev = name
	}
	ix, err := search.Decode(data[off:])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if ix.Len() != len(revisions) {
		return fail("the index holds %d tools and the revisions %d", ix.Len(), len(revisions))
	}
	for name := range revisions {
		n, err := messages.ParseToolName(name)
		if err != nil || n.String() != name || !ix.Contains(n) {
			return fail("tool %q has a revision but is not in the index", name)
		}
	}
	return &Snapshot{Index: ix, Revisions: revisions}, nil
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
