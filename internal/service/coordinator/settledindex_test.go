package coordinator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

// askingLedger is the coordinator's ledger, counting the calls a sweep
// asks the stream about.
type askingLedger struct {
	*ledger.Ledger
	mu    sync.Mutex
	asked []string
}

func (l *askingLedger) WithoutResult(ctx context.Context, calls []ledger.CallRef) ([]ledger.CallRef, error) {
	l.mu.Lock()
	for _, c := range calls {
		l.asked = append(l.asked, c.CallID)
	}
	l.mu.Unlock()
	return l.Ledger.WithoutResult(ctx, calls)
}

func (l *askingLedger) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.asked
	l.asked = nil
	return out
}

// TestSettledSweepAsksOnlyAboutCallsWithoutAResult: the sweep of settled
// calls ends every call its queue settled without a result, and asks the
// stream about no call that has one: not about the calls the index saw
// finish, nor about those awaiting an approval. What the index does not
// cover (before it started, while its consumer was lost, past its bound)
// is read as before, and nothing is missed.
func TestSettledSweepAsksOnlyAboutCallsWithoutAResult(t *testing.T) {
	_, nc, js, names := jetStreamEnv(t)
	ctx := context.Background()
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	l := &askingLedger{Ledger: ledger.New(nc, js, names)}
	const ns = "t"
	index := newSettledIndex(stream, names, time.Second)
	s := &sweeper{stream: &callStream{nc: nc, names: names, stream: stream, log: discardLogger()}, ledger: l, unavailableWait: time.Second, log: discardLogger(), index: index}

	n := 0
	queue := func(finished, awaiting bool) string {
		n++
		call := &messages.CallRequest{CallID: fmt.Sprintf("call%04d", n), Tool: ns + "-echo", Namespace: ns, Method: "echo", QueuedAt: time.Now().UTC()}
		msg := queuedEventMsg(t, names, call)
		if awaiting {
			msg.Header.Set(messages.HeaderAwaiting, "approval")
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if finished {
			res := messages.CallResult{CallID: call.CallID, Tool: call.Tool, Status: messages.StateCompleted, QueuedAt: call.QueuedAt, FinishedAt: time.Now().UTC()}
			if _, err := l.Commit(ctx, messages.TurnBucket(""), ns, &res, ""); err != nil {
				t.Fatal(err)
			}
		}
		return call.CallID
	}
	lastSeq := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	// sweep catches the index up and sweeps to the stream's end, as the
	// sweeper does once the consumer's floor is there, until the settled
	// sequence gets there.
	sweep := func() {
		t.Helper()
		floor := lastSeq()
		for range 4 {
			if err := index.catchUp(ctx); err != nil {
				t.Logf("catch up: %v", err)
			}
			if err := s.sweepSettled(ctx, ns, floor); err != nil {
				t.Fatal(err)
			}
			if s.settledUpTo(ns) >= floor {
				return
			}
		}
		t.Fatalf("settled up to %d after four sweeps, not %d", s.settledUpTo(ns), floor)
	}
	ended := func(callIDs ...string) {
		t.Helper()
		for _, id := range callIDs {
			res, err := l.AwaitResult(ctx, messages.TurnBucket(""), ns, id)
			if err != nil || res == nil || res.Error == nil || res.Error.Code != messages.ResultAttempts {
				t.Errorf("call %s: result %+v (%v), want ended by the sweep", id, res, err)
			}
		}
	}
	asked := func(step string, want ...string) {
		t.Helper()
		got := l.take()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: asked about %v, want %v", step, got, want)
		}
	}

	// Before the index starts: read as before.
	before := queue(false, false)
	finishedBefore := queue(true, false)
	if err := index.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	sweep()
	asked("before the index", before, finishedBefore)
	ended(before)

	// Followed: 200 finished calls, one awaiting, one left without a result.
	for range 100 {
		queue(true, false)
	}
	queue(false, true)
	lost := queue(false, false)
	for range 100 {
		queue(true, false)
	}
	sweep()
	asked("followed", lost)
	ended(lost)

	// The index's consumer is deleted under it: it follows again from
	// where it stopped.
	if err := js.DeleteConsumer(ctx, names.EventsStream(), index.cons.CachedInfo().Name); err != nil {
		t.Fatal(err)
	}
	queue(true, false)
	whileLost := queue(false, false)
	sweep()
	asked("after its consumer was lost", whileLost)
	ended(whileLost)

	// Past its bound it forgets and covers again; what it forgot is read.
	index.max = 3
	var past []string
	for range 6 {
		past = append(past, queue(false, false))
		queue(true, false)
	}
	sweep()
	ended(past...)
	if got := l.take(); len(got) < len(past) {
		t.Errorf("past its bound: asked about %v, want at least %v", got, past)
	}
	index.stop(ctx)
}

// TestSettledSweepReadsWhenTheIndexCannotFollow: an index whose consumer
// cannot be made again does not hold the sweep back: the calls after what
// it covers are read.
func TestSettledSweepReadsWhenTheIndexCannotFollow(t *testing.T) {
	_, nc, js, names := jetStreamEnv(t)
	ctx := context.Background()
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	l := &askingLedger{Ledger: ledger.New(nc, js, names)}
	index := newSettledIndex(stream, names, time.Second)
	s := &sweeper{stream: &callStream{nc: nc, names: names, stream: stream, log: discardLogger()}, ledger: l, unavailableWait: time.Second, log: discardLogger(), index: index}
	if err := index.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	// Its consumer is lost, and the server refuses another from now on.
	if err := js.DeleteConsumer(ctx, names.EventsStream(), index.cons.CachedInfo().Name); err != nil {
		t.Fatal(err)
	}
	index.stream = failingStream{stream}

	call := &messages.CallRequest{CallID: "stranded", Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: time.Now().UTC()}
	ack, err := js.PublishMsg(ctx, queuedEventMsg(t, names, call))
	if err != nil {
		t.Fatal(err)
	}
	if err := index.catchUp(ctx); err == nil {
		t.Fatal("the index followed with a stream that refuses its consumer")
	}
	if err := s.sweepSettled(ctx, "t", ack.Sequence); err != nil {
		t.Fatal(err)
	}
	res, err := l.AwaitResult(ctx, messages.TurnBucket(""), "t", call.CallID)
	if err != nil || res == nil || res.Error == nil || res.Error.Code != messages.ResultAttempts {
		t.Fatalf("result %+v (%v), want the call ended by the sweep", res, err)
	}
}

// failingStream refuses to create consumers, as a server would a user
// not allowed to.
type failingStream struct{ jetstream.Stream }

func (failingStream) CreateConsumer(context.Context, jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return nil, fmt.Errorf("permissions violation")
}
