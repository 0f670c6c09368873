package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/discovery"
)

// purgeMarkerTTL is how long the marker of a deleted chunk stays; nobody
// watches chunk keys, so it only has to outlive the purge itself.
const purgeMarkerTTL = time.Second

// errLeaseLapsed means the lease ran out during a write, which then left
// the manifest alone.
var errLeaseLapsed = errors.New("the index lease lapsed during the write")

// writer stores index versions and deletes superseded ones. It is used by
// the indexer's run goroutine only.
type writer struct {
	kv         jetstream.KeyValue
	id         string
	chunkSize  int
	grace      time.Duration
	orphanWait time.Duration
	valid      func() bool
	log        *slog.Logger

	// lastVersion is the highest version number this writer used, written
	// or not, so that a failed write's leftover chunks never collide with
	// the next attempt's.
	lastVersion uint64
	// firstSeen holds, for each version whose chunks await deletion, when
	// it was superseded, or when this writer first found it superseded.
	firstSeen map[uint64]time.Time
}

// write stores the tracker's index as a new version and moves the manifest
// to it, unless the current version already answers like it.
func (w *writer) write(ctx context.Context, t *discovery.Tracker) error {
	var (
		current  *discovery.Manifest
		revision uint64 // of the manifest key; 0 when there is none
	)
	e, err := w.kv.Get(ctx, discovery.ManifestKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("read the index manifest: %w", err)
	default:
		revision = e.Revision()
		if m, err := discovery.DecodeManifest(e.Value()); err == nil {
			current = &m
		} else {
			w.log.Warn("indexer: unreadable index manifest replaced", "error", err)
		}
	}
	fingerprint := t.Fingerprint()
	if current != nil && current.Fingerprint == fingerprint {
		return nil
	}
	version := w.lastVersion + 1
	if current != nil {
		version = max(version, current.Version+1)
	}
	w.lastVersion = version

	data := t.Snapshot().Encode()
	chunks := discovery.Split(data, w.chunkSize)
	for n, chunk := range chunks {
		// Create, not Put: a chunk key that exists belongs to another
		// writer's attempt at this version, which must not be mixed with ours.
		if _, err := w.kv.Create(ctx, discovery.ChunkKey(version, n), chunk); err != nil {
			return fmt.Errorf("write chunk %d of index version %d: %w", n, version, err)
		}
	}
	m := discovery.Manifest{
		Version:         version,
		Format:          discovery.SnapshotFormat,
		Chunks:          len(chunks),
		ChunkSize:       w.chunkSize,
		Size:            int64(len(data)),
		Digest:          discovery.Digest(data),
		Fingerprint:     fingerprint,
		Tools:           t.Len(),
		CatalogRevision: t.CatalogRevision(),
		WrittenAt:       time.Now().UTC(),
		Writer:          w.id,
	}
	value, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if !w.valid() {
		return errLeaseLapsed
	}
	if revision == 0 {
		_, err = w.kv.Create(ctx, discovery.ManifestKey, value)
	} else {
		_, err = w.kv.Update(ctx, discovery.ManifestKey, value, revision)
	}
	if err != nil {
		return fmt.Errorf("move the index manifest to version %d: %w", version, err)
	}
	if current != nil {
		w.firstSeen[current.Version] = time.Now()
	}
	w.log.Debug("indexer: index version written", "version", version, "tools", m.Tools, "bytes", m.Size, "chunks", m.Chunks)
	return nil
}

// sweep deletes the chunks of every version but the current one once it
// has been superseded for the grace period. Chunks of a version above the
// current one are a write that never moved the manifest, or one in
// progress by a writer whose lease lapsed; they wait at least a lease TTL,
// past which that writer no longer moves the manifest.
func (w *writer) sweep(ctx context.Context) error {
	var current uint64
	m, _, err := discovery.ReadManifest(ctx, w.kv)
	switch {
	case errors.Is(err, discovery.ErrNoIndex):
	case err != nil:
		return err
	default:
		current = m.Version
	}
	lister, err := w.kv.ListKeysFiltered(ctx, discovery.ChunksFilter)
	if err != nil {
		return fmt.Errorf("list index chunks: %w", err)
	}
	byVersion := map[uint64][]string{}
	for key := range lister.Keys() {
		if v, _, ok := discovery.ParseChunkKey(key); ok && v != current {
			byVersion[v] = append(byVersion[v], key)
		}
	}
	if err := ctx.Err(); err != nil {
		return err // the listing may have been cut short
	}
	now := time.Now()
	for v := range w.firstSeen {
		if _, ok := byVersion[v]; !ok {
			delete(w.firstSeen, v)
		}
	}
	for v, keys := range byVersion {
		seen, ok := w.firstSeen[v]
		if !ok {
			w.firstSeen[v] = now
			continue
		}
		wait := w.grace
		if v > current {
			wait = w.orphanWait
		}
		if now.Sub(seen) < wait {
			continue
		}
		for _, key := range keys {
			if err := w.kv.Purge(ctx, key, jetstream.PurgeTTL(purgeMarkerTTL)); err != nil {
				return fmt.Errorf("delete index chunk %s: %w", key, err)
			}
		}
		delete(w.firstSeen, v)
		w.log.Debug("indexer: index version deleted", "version", v, "chunks", len(keys))
	}
	return nil
}
