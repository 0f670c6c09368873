package resources_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestEnsureRefusesRollupsInTheCoordinatorsBuckets: the catalog, turns
// and approvals buckets refuse a rollup, which would empty a whole bucket
// for anyone allowed to write one key, also in an installation whose
// buckets were made before (as nats.go makes them, with rollups allowed),
// and also after Ensure runs again; their keys are still written, read,
// deleted and watched as before.
func TestEnsureRefusesRollupsInTheCoordinatorsBuckets(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	buckets := []string{names.CatalogBucket(), names.TurnsBucket(), names.ApprovalsBucket()}
	// An older installation: the buckets as nats.go creates them.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: names.CatalogBucket(), History: 1}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
			t.Fatal(err)
		}
		for _, bucket := range buckets {
			kv, err := js.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatalf("%s: %v", bucket, err)
			}
			if _, err := kv.Put(ctx, "kept.a", []byte("a")); err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, "gone.b", []byte("b")); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, "gone.b"); err != nil {
				t.Fatalf("%s: delete a key: %v", bucket, err)
			}
			roll := nats.NewMsg("$KV." + bucket + ".kept.x")
			roll.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
			if _, err := js.PublishMsg(ctx, roll); err == nil {
				t.Errorf("%s: a rollup of the whole bucket was stored", bucket)
			}
			if e, err := kv.Get(ctx, "kept.a"); err != nil || string(e.Value()) != "a" {
				t.Errorf("%s: kept.a after the refused rollup: %v", bucket, err)
			}
			stream, err := js.Stream(ctx, "KV_"+bucket)
			if err != nil {
				t.Fatal(err)
			}
			if cfg := stream.CachedInfo().Config; cfg.AllowRollup || cfg.MaxMsgsPerSubject != 1 {
				t.Errorf("%s: rollups %v, history %d", bucket, cfg.AllowRollup, cfg.MaxMsgsPerSubject)
			}
		}
	}
}
