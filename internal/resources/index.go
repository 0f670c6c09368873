package resources

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// IndexMarkerTTL is how long the bucket keeps the marker a purged key
// leaves behind; then the marker goes too, so that the keys of old index
// versions do not pile up as markers.
const IndexMarkerTTL = time.Minute

// IndexBucketConfig is the KV bucket of the discovery index: the chunks of
// each stored index version, the manifest that names the current one, and
// the lease that elects the one indexer that writes. Purges may carry a TTL
// (LimitMarkerTTL), which needs a server of API level 1 (NATS 2.11) or later.
func IndexBucketConfig(names messages.Names, cfg Config) jetstream.KeyValueConfig {
	cfg = cfg.WithDefaults()
	return jetstream.KeyValueConfig{
		Bucket:         names.IndexBucket(),
		Description:    "Toolbus discovery index: versioned chunks, manifest and writer lease",
		History:        1,
		Replicas:       cfg.Replicas,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: IndexMarkerTTL,
	}
}

// EnsureIndexBucket creates or updates the index bucket and returns it.
func EnsureIndexBucket(ctx context.Context, js jetstream.JetStream, names messages.Names, cfg Config) (jetstream.KeyValue, error) {
	kvCfg := IndexBucketConfig(names, cfg)
	kv, err := js.CreateOrUpdateKeyValue(ctx, kvCfg)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", kvCfg.Bucket, err)
	}
	return kv, nil
}
