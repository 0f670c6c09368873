package transport_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/transport"
)

// once makes a read a single attempt, to see the error of one.
var once = transport.RetryPolicy{MaxAttempts: 1}

// store publishes data on subject and returns its sequence.
func store(t *testing.T, p *transport.Publisher, subject, data string) uint64 {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = []byte(data)
	seq, _, err := p.PublishWait(testenv.Context(t), msg)
	if err != nil {
		t.Fatalf("store on %s: %v", subject, err)
	}
	return seq
}

// GetLast returns the last message on a subject with its sequence and
// stored headers; a subject without messages is ErrNotFound, a stream
// that does not exist ErrNoResponders.
func TestGetLast(t *testing.T) {
	t.Parallel()
	nc, p := streamAndPublisher(t, "last")
	ctx := testenv.Context(t)
	store(t, p, "last.a", "a1")
	msg := nats.NewMsg("last.a")
	msg.Data = []byte("a2")
	msg.Header.Set("Kept", "yes")
	seq, _, err := p.PublishWait(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	store(t, p, "last.b", "b1")

	got, gotSeq, err := transport.NewStream(nc, nil, "LAST").GetLast(ctx, "last.a")
	if err != nil || gotSeq != seq || string(got.Data) != "a2" || got.Header.Get("Kept") != "yes" {
		t.Fatalf("last of last.a: %v seq %d (want %d) error %v", got, gotSeq, seq, err)
	}
	if _, _, err := transport.NewStream(nc, nil, "LAST").GetLast(ctx, "last.none"); !errors.Is(err, transport.ErrNotFound) || !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("no message: %v", err)
	}
	if _, _, err := transport.NewStream(nc, nil, "NOSTREAM").WithPolicy(once).GetLast(ctx, "last.a"); !errors.Is(err, transport.ErrNoResponders) || errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("no stream: %v", err)
	}
}

// A multi-last batch returns the last message of every subject matching
// any of its filters, once each, in stream order, on an inbox and without
// one.
func TestGetBatchMultiLast(t *testing.T) {
	t.Parallel()
	nc, p := streamAndPublisher(t, "multi")
	inbox := transport.NewInbox(nc)
	t.Cleanup(inbox.Close)
	want := map[string]uint64{}
	for round := range 3 {
		for _, call := range []string{"c1", "c2", "c3"} {
			for _, kind := range []string{"queued", "result"} {
				subject := fmt.Sprintf("multi.%s.%s", call, kind)
				want[subject] = store(t, p, subject, fmt.Sprint(round))
			}
		}
	}
	store(t, p, "multi.other.queued", "not asked for")
	for name, inbox := range map[string]*transport.Inbox{"inbox": inbox, "own subscription": nil} {
		t.Run(name, func(t *testing.T) {
			got := map[string]uint64{}
			var last uint64
			err := transport.NewStream(nc, inbox, "MULTI").GetBatch(testenv.Context(t), transport.BatchRequest{MultiLast: []string{"multi.c1.*", "multi.c2.*", "multi.c3.>", "multi.nothing.*"}}, func(seq uint64, msg *nats.Msg) bool {
				if seq <= last {
					t.Errorf("seq %d after %d", seq, last)
				}
				last = seq
				if _, dup := got[msg.Subject]; dup || string(msg.Data) != "2" {
					t.Errorf("message %d on %s: %q", seq, msg.Subject, msg.Data)
				}
				got[msg.Subject] = seq
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}

// A batch matching nothing is empty, not an error; a batch from a sequence
// or a time on reads the messages of its subject filter until each stops
// it; a stream that does not exist is ErrNoResponders.
func TestGetBatchFromSequence(t *testing.T) {
	t.Parallel()
	nc, p := streamAndPublisher(t, "seq")
	inbox := transport.NewInbox(nc)
	t.Cleanup(inbox.Close)
	ctx := testenv.Context(t)
	s := transport.NewStream(nc, inbox, "SEQ")
	none := func(seq uint64, msg *nats.Msg) bool {
		t.Errorf("message %d on %s from an empty stream", seq, msg.Subject)
		return true
	}
	if err := s.GetBatch(ctx, transport.BatchRequest{MultiLast: []string{"seq.>"}}, none); err != nil {
		t.Fatalf("multi-last of an empty stream: %v", err)
	}
	if err := s.GetBatch(ctx, transport.BatchRequest{Seq: 1, NextBySubject: "seq.>", Batch: 10}, none); err != nil {
		t.Fatalf("batch of an empty stream: %v", err)
	}
	var calls []uint64
	for i := range 6 {
		subject := "seq.call"
		if i%2 == 1 {
			subject = "seq.other"
		}
		if seq := store(t, p, subject, fmt.Sprint(i)); subject == "seq.call" {
			calls = append(calls, seq)
		}
	}
	read := func(req transport.BatchRequest, stopAfter int) []uint64 {
		t.Helper()
		var got []uint64
		err := s.GetBatch(ctx, req, func(seq uint64, msg *nats.Msg) bool {
			if msg.Subject != "seq.call" {
				t.Errorf("message %d on %s", seq, msg.Subject)
			}
			got = append(got, seq)
			return len(got) < stopAfter
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(transport.BatchRequest{Seq: 1, NextBySubject: "seq.call", Batch: 100}, 100); fmt.Sprint(got) != fmt.Sprint(calls) {
		t.Fatalf("whole batch: %v, want %v", got, calls)
	}
	if got := read(transport.BatchRequest{Seq: calls[1], NextBySubject: "seq.call", Batch: 100}, 100); fmt.Sprint(got) != fmt.Sprint(calls[1:]) {
		t.Fatalf("from the second: %v, want %v", got, calls[1:])
	}
	if got := read(transport.BatchRequest{Seq: 1, NextBySubject: "seq.call", Batch: 100}, 1); fmt.Sprint(got) != fmt.Sprint(calls[:1]) {
		t.Fatalf("stopped after one: %v", got)
	}
	if got := read(transport.BatchRequest{Seq: 1, NextBySubject: "seq.call", Batch: 2}, 100); fmt.Sprint(got) != fmt.Sprint(calls[:2]) {
		t.Fatalf("batch of two: %v", got)
	}
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if got := read(transport.BatchRequest{StartTime: &past, NextBySubject: "seq.call", Batch: 100}, 100); fmt.Sprint(got) != fmt.Sprint(calls) {
		t.Fatalf("from an hour ago: %v, want %v", got, calls)
	}
	if got := read(transport.BatchRequest{StartTime: &future, NextBySubject: "seq.call", Batch: 100}, 100); len(got) != 0 {
		t.Fatalf("from an hour on: %v", got)
	}
	if err := transport.NewStream(nc, inbox, "NOSTREAM").WithPolicy(once).GetBatch(ctx, transport.BatchRequest{MultiLast: []string{"seq.>"}}, none); !errors.Is(err, transport.ErrNoResponders) {
		t.Fatalf("no stream: %v", err)
	}
}

// Reads and waits for acknowledgements end with their context, and a
// publish that is never acknowledged expires.
func TestWaitsEndWithContext(t *testing.T) {
	t.Parallel()
	nc, p := streamAndPublisher(t, "ctx")
	// A subscriber that never answers stands for a stream that is slow.
	if _, err := nc.Subscribe("silent.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testenv.Context(t), 50*time.Millisecond)
	defer cancel()
	if _, _, err := p.PublishWait(ctx, nats.NewMsg("silent.a")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish without an answer: %v", err)
	}
	got := make(chan error, 1)
	if err := p.PublishThen(nats.NewMsg("silent.b"), time.Millisecond, func(_ uint64, _ bool, err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish without an answer, then: %v", err)
		}
	case <-testenv.Context(t).Done():
		t.Fatal("no outcome for a publish without an answer")
	}
	if _, err := nc.Subscribe("$JS.API.DIRECT.GET.SILENT.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(testenv.Context(t), 50*time.Millisecond)
	defer cancel()
	if _, _, err := transport.NewStream(nc, nil, "SILENT").GetLast(ctx, "silent.a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("direct get without an answer: %v", err)
	}
}

// GetLastFromLeader reads through the stream's message-get API, with the
// message's headers, and says ErrNotFound for a subject without messages.
func TestGetLastFromLeader(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LEADER", Subjects: []string{"leader.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"one", "two"} {
		msg := nats.NewMsg("leader.a")
		msg.Header.Set("X-Mark", data)
		msg.Data = []byte(data)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	s := transport.NewStream(nc, nil, "LEADER")
	msg, seq, err := s.GetLastFromLeader(ctx, "leader.a")
	if err != nil || seq != 2 || string(msg.Data) != "two" || msg.Header.Get("X-Mark") != "two" || msg.Subject != "leader.a" {
		t.Fatalf("last message: %+v seq %d error %v", msg, seq, err)
	}
	if _, _, err := s.GetLastFromLeader(ctx, "leader.none"); !errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("subject without messages: %v, want ErrNotFound", err)
	}
	if _, _, err := transport.NewStream(nc, nil, "NOSTREAM").WithPolicy(transport.RetryPolicy{MaxAttempts: 1}).GetLastFromLeader(ctx, "x.y"); err == nil {
		t.Fatal("a stream that does not exist answered")
	}
}
