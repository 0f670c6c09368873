package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// counter is a tool that counts its executions, for tests that must see
// a call run exactly once.
type counter struct {
	mu    sync.Mutex
	calls map[string]int
	total atomic.Int64
}

type countArgs struct {
	Label string `json:"label"`
}

func newCounter() *counter { return &counter{calls: map[string]int{}} }

func (c *counter) tool() worker.Tool {
	return worker.Func("count", "Counts its calls.", func(ctx context.Context, in countArgs) (string, error) {
		c.mu.Lock()
		c.calls[worker.CallFrom(ctx).ID]++
		c.mu.Unlock()
		c.total.Add(1)
		return in.Label, nil
	})
}

func (c *counter) runs(callID string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[callID]
}

// gate is a tool that blocks until released, so tests can hold calls in a known state.
type gate struct {
	started chan string
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan string, 100), release: make(chan struct{})} }

func (g *gate) tool() worker.Tool {
	return worker.Func("gate", "Waits until released.", func(ctx context.Context, in struct{}) (string, error) {
		g.started <- worker.CallFrom(ctx).ID
		select {
		case <-g.release:
			return "released", nil
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	})
}

// streamLastSeq returns a stream's last sequence, to check that nothing was published.
func streamLastSeq(t *testing.T, url, stream string) uint64 {
	t.Helper()
	return streamLastSeqOn(t, testenv.Connect(t, url), stream)
}

// queuedCallsOn counts the calls ever queued that the events stream
// holds: their queued events.
func queuedCallsOn(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	s, err := js.Stream(testenv.Context(t), names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	filter, _ := names.Filters().EventKind(messages.EventQueued)
	info, err := s.Info(testenv.Context(t), jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, count := range info.State.Subjects {
		n += count
	}
	return n
}

func streamLastSeqOn(t *testing.T, nc *nats.Conn, stream string) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(testenv.Context(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(testenv.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

var names = messages.MustNames("")

// liveLeaseAckWait is the AckWait of tests where a worker cut off the
// network loses its calls: short, so that they are delivered again soon;
// long enough that a live worker, which renews its lease every third of
// it, does not lose its own on a busy machine.
const liveLeaseAckWait = 3 * time.Second

// receive waits for a value or fails the test after a generous bound.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testenv.Receive(t, ch, what)
}

// assertConsumerDrained waits until the namespace's consumer has nothing
// pending, undelivered or unacknowledged: every call it delivered was
// settled. A worker acknowledges a call a moment after its result is
// stored, and the server sends no signal when it is done, so it polls.
func assertConsumerDrained(t *testing.T, url, ns string) {
	t.Helper()
	js, err := jetstream.New(testenv.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	consumer, err := names.Consumers().Durable(ns)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for deadline := time.Now().Add(testenv.Patience); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cons, err := js.Consumer(ctx, names.EventsStream(), consumer)
		cancel()
		if err != nil {
			last = err.Error()
			continue
		}
		info := cons.CachedInfo()
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		last = fmt.Sprintf("%d calls pending, %d unacknowledged (acknowledged up to stream sequence %d)", info.NumPending, info.NumAckPending, info.AckFloor.Stream)
	}
	t.Errorf("consumer %s not drained: %s", consumer, last)
}
