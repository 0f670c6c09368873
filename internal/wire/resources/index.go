package resources

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// indexMarkerTTL is the index bucket's LimitMarkerTTL. The bucket has no
// MaxAge, so no limit marker is ever placed; setting it enables message
// TTLs, which lets the purge of an old chunk carry a TTL of its own
// (jetstream.PurgeTTL) so that the markers of deleted chunks do not pile up.
const indexMarkerTTL = time.Minute

// IndexBucketConfig is the KV bucket of the discovery index: the chunks of
// each stored index version, the manifest that names the current one, and
// the lease that elects the one indexer that writes. Message TTLs need a
// server of JetStream API level 1 (NATS 2.11) or later.
func IndexBucketConfig(names messages.Names, cfg Config) jetstream.KeyValueConfig {
	cfg = cfg.WithDefaults()
	return jetstream.KeyValueConfig{
		Bucket:         names.IndexBucket(),
		Description:    "Toolbus discovery index: versioned chunks, manifest and writer lease",
		History:        1,
		Replicas:       cfg.Replicas,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: indexMarkerTTL,
		RePublish:      BucketRePublish(names, names.IndexBucket()),
	}
}

// EnsureIndexBucket creates or updates the index bucket and returns it, at
// the installation's replication (see Resolve).
func EnsureIndexBucket(ctx context.Context, js jetstream.JetStream, names messages.Names, cfg Config) (jetstream.KeyValue, error) {
	cfg, err := Resolve(ctx, js, names, cfg)
	if err != nil {
		return nil, err
	}
	kvCfg := IndexBucketConfig(names, cfg)
	kv, err := js.CreateOrUpdateKeyValue(ctx, kvCfg)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", kvCfg.Bucket, err)
	}
	return kv, nil
}
