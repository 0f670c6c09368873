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
// when it is missing, with the replication and the retention of the
// events stream, so that a whole result is kept as long as the truncated
// one that names it. A coordinator creates it before it queues the
// namespace's first call; the namespace's workers only bind to it where
// their users may not create streams (a stream's creator chooses the
// subjects it stores), and create it themselves elsewhere.
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
