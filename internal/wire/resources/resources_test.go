package resources_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

func setup(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv := testenv.Server(t)
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// replicasOf returns the replicas of every stream of the installation,
// buckets and object store included, by stream name.
func replicasOf(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	got := map[string]int{}
	streams := js.ListStreams(testenv.Context(t))
	for info := range streams.Info() {
		got[info.Config.Name] = info.Config.Replicas
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestEnsureWithoutReplicasCreatesOneReplica(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	if n, err := resources.InstalledReplicas(ctx, js, names); err != nil || n != 0 {
		t.Fatalf("InstalledReplicas before install = %d, %v; want 0", n, err)
	}
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := resources.EnsureIndexBucket(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	for name, r := range replicasOf(t, js) {
		if r != resources.DefaultReplicas {
			t.Errorf("stream %s has %d replicas, want %d", name, r, resources.DefaultReplicas)
		}
	}
	if n, err := resources.InstalledReplicas(ctx, js, names); err != nil || n != 1 {
		t.Fatalf("InstalledReplicas = %d, %v; want 1", n, err)
	}
}

// A process started without a replication adopts the installation's, and
// one started with another replication is refused and changes nothing.
// On one server only R1 can exist, so the installation here has R1 and the
// refused process asks for 3: the refusal comes before any update.
func TestEnsureRefusesAnotherReplication(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	if err := resources.Ensure(ctx, js, names, resources.Config{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	before := replicasOf(t, js)

	err := resources.Ensure(ctx, js, names, resources.Config{Replicas: 3})
	var mismatch *resources.ReplicasMismatchError
	if !errors.Is(err, resources.ErrReplicasMismatch) || !errors.As(err, &mismatch) {
		t.Fatalf("Ensure with 3 replicas on an R1 installation: %v, want ErrReplicasMismatch", err)
	}
	if mismatch.Installed != 1 || mismatch.Requested != 3 || mismatch.Stream != names.EventsStream() {
		t.Errorf("mismatch = %+v", *mismatch)
	}
	if _, err := resources.EnsureIndexBucket(ctx, js, names, resources.Config{Replicas: 3}); !errors.Is(err, resources.ErrReplicasMismatch) {
		t.Errorf("EnsureIndexBucket with 3 replicas on an R1 installation: %v, want ErrReplicasMismatch", err)
	}

	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatalf("Ensure without replicas: %v", err)
	}
	cfg, err := resources.Resolve(ctx, js, names, resources.Config{})
	if err != nil || cfg.Replicas != 1 {
		t.Fatalf("Resolve without replicas = %d, %v; want the installation's 1", cfg.Replicas, err)
	}
	after := replicasOf(t, js)
	for name, r := range before {
		if after[name] != r {
			t.Errorf("stream %s went from %d to %d replicas", name, r, after[name])
		}
	}
}

// EnsureExisting (what workers run) never refuses and never changes the
// installation: what it creates takes the installation's replication.
func TestEnsureExistingAdoptsTheInstallation(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	// Without its catalog (whose presence stands for a whole
	// installation), the installation is looked at and completed.
	if err := js.DeleteKeyValue(ctx, names.TurnsBucket()); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, names.CatalogBucket()); err != nil {
		t.Fatal(err)
	}
	if err := resources.EnsureExisting(ctx, js, names, resources.Config{Replicas: 3, Reconfigure: true}); err != nil {
		t.Fatalf("EnsureExisting asking for 3 replicas on an R1 installation: %v", err)
	}
	for name, r := range replicasOf(t, js) {
		if r != 1 {
			t.Errorf("stream %s has %d replicas, want the installation's 1", name, r)
		}
	}
	if _, err := js.KeyValue(ctx, names.TurnsBucket()); err != nil {
		t.Errorf("the missing turns bucket was not created: %v", err)
	}
}

func TestResolveRejectsBadRequests(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	for _, cfg := range []resources.Config{{Replicas: -1}, {Reconfigure: true}} {
		if _, err := resources.Resolve(ctx, js, names, cfg); err == nil {
			t.Errorf("Resolve(%+v) succeeded", cfg)
		}
	}
}

// On a three-node cluster: a new installation without a replication gets 1;
// asking for 3 is refused until a reconfigure, which moves everything to 3;
// from then on processes without the flag adopt 3, one asking for 1 is
// refused, and a worker's EnsureExisting changes nothing.
func TestReplicationInACluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	urls := testenv.Cluster(t, 3)
	js, err := jetstream.New(testenv.Connect(t, urls))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := resources.Ensure(ctx, js, names, resources.Config{Replicas: 3}); !errors.Is(err, resources.ErrReplicasMismatch) {
		t.Fatalf("Ensure with 3 replicas on an R1 installation: %v, want ErrReplicasMismatch", err)
	}
	if err := resources.Ensure(ctx, js, names, resources.Config{Replicas: 3, Reconfigure: true}); err != nil {
		t.Fatalf("reconfigure to 3: %v", err)
	}
	if _, err := resources.EnsureIndexBucket(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatalf("Ensure without replicas on an R3 installation: %v", err)
	}
	if err := resources.EnsureExisting(ctx, js, names, resources.Config{Replicas: 1}); err != nil {
		t.Fatalf("EnsureExisting asking for 1 on an R3 installation: %v", err)
	}
	err = resources.Ensure(ctx, js, names, resources.Config{Replicas: 1})
	var mismatch *resources.ReplicasMismatchError
	if !errors.As(err, &mismatch) || mismatch.Installed != 3 || mismatch.Requested != 1 {
		t.Fatalf("Ensure with 1 replica on an R3 installation: %v, want a mismatch of 3 and 1", err)
	}
	for name, r := range replicasOf(t, js) {
		if r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, r)
		}
	}
}
