package ledger

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestTurnCallsReadsAlike: a turn's calls are the same, each once, whether they are scanned from the turn's
// first sequence or read as the last queued event of each of the turn's
// subjects (for a turn that began long ago); calls queued before the
// turn's first sequence are not its.
func TestTurnCallsReadsAlike(t *testing.T) {
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	ctx := context.Background()
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	l := New(nc, js, names)
	t.Cleanup(l.Close)
	queue := func(id, turn string, held bool) {
		t.Helper()
		call := &messages.CallRequest{CallID: id, Tool: "t-echo", Namespace: "t", Method: "echo", Turn: turn}
		if held {
			if _, err := l.Hold(ctx, call); err != nil {
				t.Fatal(err)
			}
			return
		}
		msg, err := l.EventMsg(messages.TurnBucket(turn), "t", &messages.CallEvent{CallID: id, Kind: messages.EventQueued, Request: call})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	queue("before", "turn-1", false)
	from, err := l.Turns().LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	from++
	queue("c1", "turn-1", false)
	queue("other", "turn-2", false)
	queue("held", "turn-1", true)
	queue("c2", "turn-1", false)
	queue("held", "turn-1", false) // approved: queued again
	for range 20 {
		queue("filler", "turn-3", false)
	}
	want := []string{"c1", "c2", "held"}
	sorted := func(ids []string) []string { slices.Sort(ids); return ids }
	scanned, err := l.Turns().TurnCalls(ctx, "turn-1", from, 100)
	if err != nil || !slices.Equal(sorted(scanned), want) {
		t.Fatalf("scanned: %v (%v), want %v", scanned, err, want)
	}
	defer func(limit uint64) { turnScanLimit = limit }(turnScanLimit)
	turnScanLimit = 10
	byLast, err := l.Turns().TurnCalls(ctx, "turn-1", from, 100)
	if err != nil || !slices.Equal(sorted(byLast), want) {
		t.Fatalf("read by last messages: %v (%v), want %v", byLast, err, want)
	}
	if two, err := l.Turns().TurnCalls(ctx, "turn-1", from, 2); err != nil || len(two) != 2 {
		t.Fatalf("at most 2: %v (%v)", two, err)
	}
}

// TestLastSeqAfterOwnWrite: right after one of the ledger's writes is
// acknowledged, LastSeq answers that write's sequence without asking the
// stream, a lower bound of the stream's last (which another connection
// has moved on); a duplicate's answer is not taken; once the answer is
// older than ackedSeqFresh, the stream's last sequence is read.
func TestLastSeqAfterOwnWrite(t *testing.T) {
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	ctx := context.Background()
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	l := New(nc, js, names)
	t.Cleanup(l.Close)
	other := func(id string) uint64 {
		t.Helper()
		msg, err := l.EventMsg("00", "t", &messages.CallEvent{CallID: id, Kind: messages.EventLog})
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	other("first")
	own, err := l.Append(ctx, "00", "t", &messages.CallEvent{CallID: "own", Kind: messages.EventLog})
	if err != nil {
		t.Fatal(err)
	}
	last := other("second")
	if got, err := l.Turns().LastSeq(ctx); err != nil || got != own {
		t.Fatalf("LastSeq right after the ledger's write at %d: %d (%v)", own, got, err)
	}
	// A duplicate of "first", sent through the ledger, is answered with
	// first's sequence, which is not noted.
	dup, err := l.EventMsg("00", "t", &messages.CallEvent{CallID: "first", Kind: messages.EventLog})
	if err != nil {
		t.Fatal(err)
	}
	dup.Header.Set(jetstream.MsgIDHeader, "first")
	if _, duplicate, err := l.pub.PublishRetrying(ctx, transport.WritePolicy, dup); err != nil || !duplicate {
		t.Fatalf("duplicate: %v %v", duplicate, err)
	} else if _, err := l.w.store(ctx, dup); err != nil {
		t.Fatalf("duplicate through the ledger's writes: %v", err)
	}
	if got, err := l.Turns().LastSeq(ctx); err != nil || got != own {
		t.Fatalf("LastSeq after a duplicate: %d (%v), want %d", got, err, own)
	}
	l.acks.at.Store(time.Now().Add(-ackedSeqFresh).UnixNano())
	if got, err := l.Turns().LastSeq(ctx); err != nil || got != last {
		t.Fatalf("LastSeq once the answer is old: %d (%v), want the stream's last, %d", got, err, last)
	}
	// The sequence read is remembered like an acknowledgement: new turns
	// that search without calls do not each read the stream's state, and
	// what they get stays a lower bound of later writes.
	if seq, ok := l.acks.recent(time.Hour); !ok || seq != last {
		t.Fatalf("remembered %d (%v) after reading the stream's last, %d", seq, ok, last)
	}
	third := other("third")
	// However slow that write: the remembered read counts as just made.
	l.acks.at.Store(time.Now().UnixNano())
	if got, err := l.Turns().LastSeq(ctx); err != nil || got != last || got >= third {
		t.Fatalf("LastSeq right after a read: %d (%v), want the sequence read, %d, below the later write's %d", got, err, last, third)
	}
}
