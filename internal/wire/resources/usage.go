package resources

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// usageMarkerTTL is the usage bucket's LimitMarkerTTL: it enables the
// message TTLs that bound every key's life (a turn's searches, an agent's
// evidence, a deletion's marker), and makes the server mark a key whose
// value expired, so that the indexer, which follows the bucket, forgets it.
const usageMarkerTTL = time.Minute

// DefaultUsageMaxBytes is Config.UsageMaxBytes's default.
const DefaultUsageMaxBytes = 64 << 20

// usageMaxValueSize bounds one value of the usage bucket: a turn's
// searches (at most 16 of at most 50 tools and 16 terms) or one agent's
// evidence for one tool (at most 24 terms) stays far below it.
const usageMaxValueSize = 64 << 10

// UsageBucketConfig is the KV bucket of usage evidence: what agents
// searched for in each turn, for as long as a turn lasts, and what each
// agent's use says of each tool, for the retention the coordinator writes
// it with (docs/operations.md, "Discovery that learns from use"). The
// coordinator writes it; the indexer reads it. Once full, new evidence is
// refused (and not recorded) until keys expire.
func UsageBucketConfig(names messages.Names, cfg Config) jetstream.KeyValueConfig {
	cfg = cfg.WithDefaults()
	return jetstream.KeyValueConfig{
		Bucket:         names.UsageBucket(),
		Description:    "Toolbus usage evidence: each turn's searches, each agent's evidence per tool, the learning switch",
		History:        1,
		Replicas:       cfg.Replicas,
		Storage:        jetstream.FileStorage,
		MaxBytes:       cfg.UsageMaxBytes,
		MaxValueSize:   usageMaxValueSize,
		LimitMarkerTTL: usageMarkerTTL,
		RePublish:      BucketRePublish(names, names.UsageBucket()),
	}
}

// EnsureUsageBucket creates or updates the usage bucket and returns it, at
// the installation's replication (see Resolve). Only a coordinator calls
// it: no other role may create or write the bucket.
func EnsureUsageBucket(ctx context.Context, js jetstream.JetStream, names messages.Names, cfg Config) (jetstream.KeyValue, error) {
	cfg, err := Resolve(ctx, js, names, cfg)
	if err != nil {
		return nil, err
	}
	kvCfg := UsageBucketConfig(names, cfg)
	if err := ensureBucket(ctx, js, kvCfg, true); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", kvCfg.Bucket, err)
	}
	kv, err := js.KeyValue(ctx, kvCfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", kvCfg.Bucket, err)
	}
	return kv, nil
}
