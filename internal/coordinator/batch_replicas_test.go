package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/natsserver"
)

// TestStreamReplicas: a batch skips its calls' own existence reads only
// on a stream of one replica; a stream whose configuration cannot be read
// is taken as replicated. (A batch on replicated streams is run in
// test/integration's TestBatchInACluster.)
func TestStreamReplicas(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ONE", Subjects: []string{"one.>"}, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	for stream, want := range map[string]bool{"ONE": true, "MISSING": false} {
		var r streamReplicas
		if got := r.single(ctx, js, stream); got != want {
			t.Errorf("stream %s: single = %v, want %v", stream, got, want)
		}
	}
}
