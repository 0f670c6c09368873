// Package resources creates the JetStream streams, consumers and buckets that
// Toolbus runs on. Every function is idempotent: each process calls them at
// start, in any order, and an existing resource is updated to the
// configuration it should have.
//
// The replication of an installation is chosen once, by the first process
// that creates the events stream, and is read back from that stream's
// configuration from then on (see InstalledReplicas): a process that asks
// for no particular replication adopts it, one that asks for another is
// refused with ErrReplicasMismatch, and only Config.Reconfigure changes it.
package resources

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Config sizes the resources.
type Config struct {
	// Replicas of every stream and bucket: 1 for one server, 3 or 5 in a
	// cluster. Zero adopts the installation's replication (the events
	// stream's replicas), or 1 when the installation has no events stream
	// yet. A value that differs from the installation's is refused with
	// ErrReplicasMismatch unless Reconfigure is set.
	Replicas int
	// Reconfigure lets Ensure change the installation's replication to
	// Replicas: every existing stream and bucket is updated to it. It is
	// an operator's action (the coordinator's --reconfigure flag); without
	// it a replication is never changed once chosen.
	Reconfigure bool
	// EventsMaxAge is how long call events, and so results and idempotency
	// keys, are kept. Defaults to 72h.
	EventsMaxAge time.Duration
	// DuplicateWindow is how long the events stream remembers message IDs
	// (a call's queued event carries one) to drop duplicate publishes.
	// Defaults to 2m.
	DuplicateWindow time.Duration
	// MaxQueuedCalls bounded the calls waiting in the calls stream of
	// protocol version 2. Since version 3 a queued call is its queued
	// event in the events stream, which EventsMaxAge bounds; the field is
	// kept for configurations that set it, and ignored.
	MaxQueuedCalls int64
	// MaxCallBytes bounded one call message of version 2; ignored since
	// version 3 (the coordinator's MaxArgumentsBytes bounds a call).
	MaxCallBytes int32
	// AuditMaxAge is how long policy decisions are kept. Defaults to 30 days.
	AuditMaxAge time.Duration
	// ApprovalsMaxAge is how long decided approvals and remembered grants
	// are kept. Defaults to 7 days.
	ApprovalsMaxAge time.Duration
	// MaxWatchers bounds the calls watched event by event at once: each
	// watch holds a consumer on the events stream. Waiting for a result
	// holds none. Defaults to 10,000.
	MaxWatchers int
	// UsageMaxBytes bounds the usage bucket (UsageBucketConfig). Defaults
	// to DefaultUsageMaxBytes.
	UsageMaxBytes int64
}

// DefaultReplicas is the replication of a new installation when the
// process that creates it asks for none.
const DefaultReplicas = 1

// ErrReplicasMismatch is returned when a process asks for a replication
// other than the installation's and does not ask to reconfigure it.
var ErrReplicasMismatch = errors.New("replicas differ from the installation's")

// ReplicasMismatchError says which replication was asked for and which one
// the installation has. It matches ErrReplicasMismatch.
type ReplicasMismatchError struct {
	Stream    string
	Installed int
	Requested int
}

func (e *ReplicasMismatchError) Error() string {
	return fmt.Sprintf("%v: asked for %d, but stream %s has %d; start without --replicas to adopt %d, "+
		"or change the installation's replication with --replicas %d --reconfigure on one coordinator",
		ErrReplicasMismatch, e.Requested, e.Stream, e.Installed, e.Installed, e.Requested)
}

// Is matches ErrReplicasMismatch.
func (e *ReplicasMismatchError) Is(target error) bool { return target == ErrReplicasMismatch }

// InstalledReplicas returns the installation's replication: the replicas
// of its events stream, or 0 when there is no events stream yet.
func InstalledReplicas(ctx context.Context, js jetstream.JetStream, names messages.Names) (int, error) {
	return replicasOf(ctx, js, names.EventsStream())
}

// replicasOf returns the replicas of a stream, 0 when there is none.
func replicasOf(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	return s.CachedInfo().Config.Replicas, nil
}

// catalogStream is the stream of the catalog bucket. The services that
// are not the coordinator learn the installation from it: they may not
// read the events stream's information, whose subjects name every call
// (docs/security.md), and a coordinator creates and reconfigures the
// catalog with the streams.
func catalogStream(names messages.Names) string { return "KV_" + names.CatalogBucket() }

// Resolve returns cfg with Replicas set to the replication the resources
// must have: the installation's when cfg asks for none, cfg's own when
// nothing is installed yet or Reconfigure is set. It fails with
// ErrReplicasMismatch when cfg asks for another replication than the
// installation's without Reconfigure.
func Resolve(ctx context.Context, js jetstream.JetStream, names messages.Names, cfg Config) (Config, error) {
	if cfg.Replicas < 0 {
		return cfg, fmt.Errorf("replicas %d is negative", cfg.Replicas)
	}
	if cfg.Reconfigure && cfg.Replicas == 0 {
		return cfg, errors.New("reconfigure needs the replicas to change to")
	}
	return resolve(ctx, js, cfg, names.EventsStream())
}

// ResolveByCatalog is Resolve for a service that is not the coordinator:
// it reads the installation's replication from the catalog bucket's
// stream, which a coordinator creates and reconfigures with the others,
// and never changes it.
func ResolveByCatalog(ctx context.Context, js jetstream.JetStream, names messages.Names, cfg Config) (Config, error) {
	if cfg.Replicas < 0 {
		return cfg, fmt.Errorf("replicas %d is negative", cfg.Replicas)
	}
	cfg.Reconfigure = false
	return resolve(ctx, js, cfg, catalogStream(names))
}

func resolve(ctx context.Context, js jetstream.JetStream, cfg Config, stream string) (Config, error) {
	installed, err := replicasOf(ctx, js, stream)
	if err != nil {
		return cfg, err
	}
	switch {
	case installed == 0 || cfg.Reconfigure:
	case cfg.Replicas == 0:
		cfg.Replicas = installed
	case cfg.Replicas != installed:
		return cfg, &ReplicasMismatchError{Stream: stream, Installed: installed, Requested: cfg.Replicas}
	}
	return cfg.WithDefaults(), nil
}

// WithDefaults returns the config with zero fields set to their defaults.
// It does not look at the installation: Resolve does.
func (c Config) WithDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.EventsMaxAge == 0 {
		c.EventsMaxAge = 72 * time.Hour
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.MaxQueuedCalls == 0 {
		c.MaxQueuedCalls = 1_000_000
	}
	if c.MaxCallBytes == 0 {
		c.MaxCallBytes = 1 << 20
	}
	if c.AuditMaxAge == 0 {
		c.AuditMaxAge = 30 * 24 * time.Hour
	}
	if c.ApprovalsMaxAge == 0 {
		c.ApprovalsMaxAge = 7 * 24 * time.Hour
	}
	if c.MaxWatchers == 0 {
		c.MaxWatchers = 10_000
	}
	if c.UsageMaxBytes == 0 {
		c.UsageMaxBytes = DefaultUsageMaxBytes
	}
	return c
}

// Ensure creates or updates the streams and buckets that coordinators
// and workers use: the events and audit streams, and the catalog, turns
// and approvals buckets. The calls stream of protocol version 2 is
// neither created nor touched: an operator removes an old
// installation's once it is drained (docs/operations.md). Each namespace's results object store is
// created by its workers when they first need it (EnsureResultsBucket). Coordinators own
// their configuration and update them; workers, whose NATS users may not
// manage streams, only create what is missing (see EnsureExisting).
//
// The replication is resolved first (see Resolve): Ensure fails with
// ErrReplicasMismatch, changing nothing, when cfg asks for a replication
// other than the installation's without Reconfigure.
func Ensure(ctx context.Context, js jetstream.JetStream, names messages.Names, cfg Config) error {
	cfg, err := Resolve(ctx, js, names, cfg)
	if err != nil {
		return err
	}
	return ensure(ctx, js, names, cfg, true)
}

// EnsureExisting creates what is missing and leaves existing resources as
// they are, so that it needs only read access to JetStream once a
// coordinator has run. What it creates takes the installation's
// replication when there is one, whatever cfg asks for: it never changes
// the installation, so it never refuses to start over a replication either.
//
// An installation whose catalog bucket exists is taken as whole, and
// nothing else is read: a coordinator creates the streams before the
// buckets, and the users of workers and indexers may read the catalog's
// stream information but not the events stream's, which would list every
// call (docs/security.md). Where there is no catalog yet (a worker or
// indexer started before any coordinator, on a server that lets it),
// everything is created.
func EnsureExisting(ctx context.Context, js jetstream.JetStream, names messages.Names, cfg Config) error {
	installed, err := replicasOf(ctx, js, catalogStream(names))
	if err != nil {
		return err
	}
	if installed != 0 {
		return nil
	}
	// No catalog: a server that lets this user create streams, and so read
	// their information, of which some may exist.
	if installed, err = InstalledReplicas(ctx, js, names); err != nil {
		return err
	}
	if installed != 0 {
		cfg.Replicas = installed
	}
	cfg.Reconfigure = false
	return ensure(ctx, js, names, cfg.WithDefaults(), false)
}

func ensure(ctx context.Context, js jetstream.JetStream, names messages.Names, cfg Config, update bool) error {
	for _, sc := range []jetstream.StreamConfig{EventsStreamConfig(names, cfg), AuditStreamConfig(names, cfg)} {
		if !update {
			if _, err := js.Stream(ctx, sc.Name); err == nil {
				continue
			}
		}
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	for _, kv := range []jetstream.KeyValueConfig{
		{Bucket: names.CatalogBucket(), Description: "Toolbus tool catalog and worker liveness", History: 1, Replicas: cfg.Replicas, Storage: jetstream.FileStorage,
			RePublish: BucketRePublish(names, names.CatalogBucket())},
		{Bucket: names.TurnsBucket(), Description: "Toolbus agent turns", History: 1, Replicas: cfg.Replicas, Storage: jetstream.FileStorage, TTL: cfg.EventsMaxAge},
		{Bucket: names.ApprovalsBucket(), Description: "Toolbus approvals and remembered grants", History: 1, Replicas: cfg.Replicas, Storage: jetstream.FileStorage, TTL: cfg.ApprovalsMaxAge},
	} {
		if !update {
			if _, err := js.KeyValue(ctx, kv.Bucket); err == nil {
				continue
			}
		}
		if err := ensureBucket(ctx, js, kv, update); err != nil {
			return fmt.Errorf("bucket %s: %w", kv.Bucket, err)
		}
	}
	return nil
}

// ensureBucket creates or updates a bucket of the coordinator's, and
// refuses rollups in it. A key-value bucket allows them so that a key's
// history can be purged, which Toolbus never does; but a rollup of "all"
// purges the whole bucket, and the server lets anyone who may write one
// key send it: a worker, which may write its namespace's catalog keys,
// could erase every namespace's tools and the operators' switches. An
// existing bucket is updated in place, never through a configuration
// that allows rollups again. Only a coordinator (update) may change a
// bucket; a bucket another role creates is fixed by the next coordinator.
func ensureBucket(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValueConfig, update bool) error {
	stream, err := js.Stream(ctx, "KV_"+kv.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateOrUpdateKeyValue(ctx, kv); err != nil {
			return err
		}
		if !update {
			return nil
		}
		stream, err = js.Stream(ctx, "KV_"+kv.Bucket)
	}
	if err != nil {
		return err
	}
	cfg := stream.CachedInfo().Config
	want := cfg
	want.Description = kv.Description
	want.MaxMsgsPerSubject = max(int64(kv.History), 1)
	want.Replicas = max(kv.Replicas, 1)
	want.MaxAge = kv.TTL
	if want.MaxAge > 0 && want.MaxAge < want.Duplicates {
		want.Duplicates = want.MaxAge
	}
	want.AllowRollup = false
	want.RePublish = kv.RePublish
	want.MaxBytes = orUnlimited(kv.MaxBytes)
	want.MaxMsgSize = int32(orUnlimited(int64(kv.MaxValueSize)))
	if kv.LimitMarkerTTL > 0 {
		want.SubjectDeleteMarkerTTL = kv.LimitMarkerTTL
		want.AllowMsgTTL = true
	}
	if reflect.DeepEqual(want, cfg) {
		return nil
	}
	_, err = js.UpdateStream(ctx, want)
	return err
}

// orUnlimited is a limit of a key-value configuration as its stream has
// it: 0, no limit, is -1 there.
func orUnlimited(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// BucketRePublish has a bucket's stream republish the headers of each
// message it stores on names.BucketChanges: the signal that the indexer,
// which may not create consumers, follows the catalog and its index
// bucket by (transport.WatchKV).
func BucketRePublish(names messages.Names, bucket string) *jetstream.RePublish {
	return &jetstream.RePublish{Source: "$KV." + bucket + ".>", Destination: names.BucketChanges(bucket, ">"), HeadersOnly: true}
}

// EventsStreamConfig is the stream of call events, results included. A
// call's queued event is also its work item: each namespace's workers
// take their calls from it through the namespace's consumer
// (EnsureNamespaceConsumer), whose acknowledgements move the consumer's
// floor and leave the record in place.
func EventsStreamConfig(names messages.Names, cfg Config) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:        names.EventsStream(),
		Description: "Toolbus call events and results",
		Subjects:    []string{names.EventsSubjects()},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.EventsMaxAge,
		Duplicates:  cfg.DuplicateWindow,
		// Watches and the namespaces' consumers.
		MaxConsumers: cfg.MaxWatchers + MaxNamespaceConsumers,
		Storage:      jetstream.FileStorage,
		Replicas:     cfg.Replicas,
		AllowDirect:  true,
		// Each committed result is also sent to its call's route (see
		// messages.RouteNames.Subject), so that callers need no message from the
		// worker and no subscription per call.
		RePublish: &jetstream.RePublish{Source: names.Routes().RepublishFrom(), Destination: names.Routes().RepublishTo()},
	}
}

// AuditStreamConfig is the stream of policy decisions. Its records leave
// it only by age: the server refuses to purge it or to delete one of its
// messages, whatever the caller's permissions, and an update cannot turn
// either refusal off again. Ensure turns both on in an installation made
// before they existed.
func AuditStreamConfig(names messages.Names, cfg Config) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:        names.Audit().Stream(),
		Description: "Toolbus policy decisions",
		Subjects:    []string{names.Audit().Subjects()},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.AuditMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		DenyPurge:   true,
		DenyDelete:  true,
		// The auditor's user reads the audit log by direct get, which
		// needs no consumer (docs/security.md).
		AllowDirect: true,
	}
}

// NamespaceConsumer describes the pull consumer one namespace's workers share.
type NamespaceConsumer struct {
	Namespace string
	// MaxConcurrency is the namespace's cluster-wide limit of calls in progress.
	MaxConcurrency int
	// AckWait is how long a worker may hold a call without a heartbeat.
	AckWait time.Duration
	// MaxAttempts is how many times a call is delivered to run; one more
	// delivery lets a worker record the failure.
	MaxAttempts int
}

// MaxNamespaceConsumers is how many namespaces' consumers the events
// stream makes room for beside MaxWatchers watches.
const MaxNamespaceConsumers = 1024

// DefaultNamespaceConsumer is the consumer a coordinator creates for a
// namespace that has none when it queues the namespace's first call: the
// worker defaults (pkg/worker), which the namespace's first worker
// replaces with its own.
func DefaultNamespaceConsumer(ns string) NamespaceConsumer {
	return NamespaceConsumer{Namespace: ns, MaxConcurrency: 1024, AckWait: 30 * time.Second, MaxAttempts: 3}
}

// EnsureNamespaceConsumer creates or updates the namespace's durable pull
// consumer on the events stream. It delivers the namespace's queued
// events from its creation on (DeliverNew): a coordinator creates it
// before it queues the namespace's first call (CreateNamespaceConsumer),
// so no call is queued before it, and the events of older calls are
// records, not work.
func EnsureNamespaceConsumer(ctx context.Context, js jetstream.JetStream, names messages.Names, nc NamespaceConsumer) (jetstream.Consumer, error) {
	cfg, err := namespaceConsumerConfig(names, nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, names.EventsStream(), cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	return cons, nil
}

// CreateNamespaceConsumer creates the namespace's consumer if it has none,
// and leaves an existing one as it is (its workers' configuration).
func CreateNamespaceConsumer(ctx context.Context, js jetstream.JetStream, names messages.Names, nc NamespaceConsumer) error {
	cfg, err := namespaceConsumerConfig(names, nc)
	if err != nil {
		return err
	}
	if _, err := js.Consumer(ctx, names.EventsStream(), cfg.Durable); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	_, err = js.CreateConsumer(ctx, names.EventsStream(), cfg)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("consumer %s: %w", cfg.Durable, err)
	}
	return nil
}

func namespaceConsumerConfig(names messages.Names, nc NamespaceConsumer) (jetstream.ConsumerConfig, error) {
	durable, err := names.Consumers().Durable(nc.Namespace)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	filter, err := names.Filters().NamespaceQueue(nc.Namespace)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if nc.MaxAttempts < 1 || nc.MaxConcurrency < 1 || nc.AckWait <= 0 {
		return jetstream.ConsumerConfig{}, errors.New("namespace consumer needs MaxAttempts, MaxConcurrency and AckWait")
	}
	return jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "Toolbus workers of namespace " + nc.Namespace,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       nc.AckWait,
		MaxDeliver:    nc.MaxAttempts + 1,
		MaxAckPending: nc.MaxConcurrency,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		// Every free worker slot keeps one pull request waiting.
		MaxWaiting: 4096,
	}, nil
}
