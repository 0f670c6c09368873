// Package discovery is the discovery index that coordinators search, and the
// layout in which the indexer stores it.
//
// # The index bucket
//
// The bucket "<prefix>_index" (resources.EnsureIndexBucket) holds:
//
//   - "v.<version>.<n>": chunk n, from 0, of a stored version: the bytes of
//     a Snapshot cut into DefaultChunkSize pieces, each well below the
//     server's maximum payload. Chunks are created once and never changed.
//   - "manifest": the Manifest of the current version, in JSON: version,
//     format, chunk count and size, total size, SHA-256 digest of the
//     snapshot, fingerprint, tool count, catalog revision, time and writer
//     ID. The writer moves it by compare-and-set after all of a version's
//     chunks are written, and deletes a superseded version's chunks only
//     after a grace period, so that a reader that read a manifest finds its
//     chunks even while a newer version replaces it.
//   - "lease": which indexer writes (see package indexer).
//
// # Following the catalog
//
// A Tracker keeps a search index equal to the enabled tools of a
// catalog.View, re-indexing only the tools whose catalog revision changed.
// Disabled tools are removed from the index, not filtered out at query
// time, so a stored version never holds one. Tools of namespaces without a
// live worker stay indexed, since liveness changes far more often than
// definitions and differs from one moment to the next; Index.Search leaves
// them out at query time.
//
// An Index, what a coordinator holds, loads the current stored version at
// start (checking its size and digest; anything wrong falls back to a
// build from the catalog view), applies every catalog change to it as soon
// as the view has it, and swaps in each newer stored version, which it
// first brings up to date with the view: the view only moves forward, so a
// swap never undoes a change the index already showed. A stored version
// whose fingerprint equals the index in use is not loaded at all.
package discovery
