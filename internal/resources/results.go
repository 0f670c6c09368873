package resources

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// EnsureResultsBucket returns namespace ns's results object store, the
// one that keeps its results too large for one message, and creates it
// on first use. It is created by the namespace's workers, whose users may
// manage that one store (and no other namespace's), with the replication
// and the retention of the events stream, so that a whole result is kept
// as long as the truncated one that names it.
func EnsureResultsBucket(ctx context.Context, js jetstream.JetStream, names messages.Names, ns string) (jetstream.ObjectStore, error) {
	bucket, err := names.NamespaceResultsBucket(ns)
	if err != nil {
		return nil, err
	}
	obj, err := js.ObjectStore(ctx, bucket)
	if err == nil {
		return obj, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("object store %s: %w", bucket, err)
	}
	events, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		return nil, fmt.Errorf("object store %s: read the events stream's retention: %w", bucket, err)
	}
	ec := events.CachedInfo().Config
	obj, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "Toolbus results of namespace " + ns + " too large for one message",
		TTL:         ec.MaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    ec.Replicas,
	})
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Another worker of the namespace created it meanwhile.
		obj, err = js.ObjectStore(ctx, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", bucket, err)
	}
	return obj, nil
}
