package lease

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
)

const testKey = "duties.test"

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// bucket starts a server and makes a bucket for the lease.
func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// startLease runs a lease until the returned function ends its run, as a
// crash would, without releasing it.
func startLease(t *testing.T, kv jetstream.KeyValue, holder string, ttl time.Duration) (*Lease, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := New(kv, testKey, "test", holder, ttl, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	w, err := l.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx, w) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return l, stop
}

// awaitValid waits, event by event, until the lease's validity is want.
func awaitValid(t *testing.T, l *Lease, want bool) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for l.Valid() != want {
		select {
		case <-l.Changes():
		case <-timeout:
			t.Fatalf("lease of %s never became valid=%v", l.Holder(), want)
		}
	}
}

// TestLeaseTakeover: of two processes one holds the lease; when it dies
// without releasing, the other takes over after a TTL without renewals,
// by which time the dead one's validity has run out.
func TestLeaseTakeover(t *testing.T) {
	t.Parallel()
	// Renewed every third of it: a busy machine's late wake-ups do not
	// make the holder miss one.
	const ttl = 2 * time.Second
	kv := bucket(t)
	first, stopFirst := startLease(t, kv, "first", ttl)
	awaitValid(t, first, true)
	second, _ := startLease(t, kv, "second", ttl)
	// The second sees the first renew for several periods and stays a standby.
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		select {
		case <-second.Changes():
			t.Fatalf("the standby's lease changed while the holder renewed it: valid=%v", second.Valid())
		case <-time.After(ttl / 10):
		}
	}
	if !first.Valid() {
		t.Fatal("the holder's lease lapsed while it renewed it")
	}

	stopFirst()
	died := time.Now()
	awaitValid(t, second, true)
	took := time.Since(died)
	if first.Valid() {
		t.Fatal("both leases valid at once")
	}
	// The last renewal the standby saw was at most ttl/3 before the death,
	// and it checks every ttl/3: it takes over no sooner than 2/3 of the
	// TTL, and about a TTL later. The upper bound leaves a busy machine
	// seconds of slack; it fails a standby that waits for several TTLs.
	if took < ttl/2 || took > 5*ttl {
		t.Fatalf("standby took over %v after the holder died; TTL %v", took, ttl)
	}
}

// TestLeaseRelease: a holder that stops releases the lease, and the standby
// takes it at once rather than after a TTL.
func TestLeaseRelease(t *testing.T) {
	t.Parallel()
	// Long, so that taking the lease at once and after the TTL are far
	// apart however busy the machine.
	const ttl = time.Minute
	kv := bucket(t)
	first, stopFirst := startLease(t, kv, "first", ttl)
	awaitValid(t, first, true)
	second, _ := startLease(t, kv, "second", ttl)
	stopFirst()
	start := time.Now()
	first.Release(context.Background())
	awaitValid(t, second, true)
	if took := time.Since(start); took > ttl/2 {
		t.Fatalf("standby took a released lease after %v", took)
	}
}
