package transport_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/transport"
)

// streamAndPublisher starts a server with a stream of the subjects under
// prefix, and returns a connection and a publisher on it. The stream's
// name is prefix in capitals; it allows direct gets.
func streamAndPublisher(t *testing.T, prefix string) (*nats.Conn, *transport.Publisher) {
	t.Helper()
	srv := testenv.Server(t)
	nc := testenv.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(testenv.Context(t), jetstream.StreamConfig{Name: strings.ToUpper(prefix), Subjects: []string{prefix + ".>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	inbox := transport.NewInbox(nc)
	t.Cleanup(inbox.Close)
	return nc, transport.NewPublisher(nc, inbox)
}

// PublishWait reads JetStream's acknowledgements itself: stored, duplicate,
// refused by a condition, and no stream at all, each error recognisable
// both as transport's and as nats.go's.
func TestPublishReadsAcknowledgements(t *testing.T) {
	t.Parallel()
	_, p := streamAndPublisher(t, "acks")
	ctx := testenv.Context(t)
	publish := func(subject, msgID, expectedLast string) (uint64, bool, error) {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data = []byte("x")
		if msgID != "" {
			msg.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		if expectedLast != "" {
			msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, expectedLast)
		}
		return p.PublishWait(ctx, msg)
	}
	for i, want := range []uint64{1, 2} {
		if seq, dup, err := publish("acks.a", "", ""); err != nil || dup || seq != want {
			t.Fatalf("publish %d: seq %d duplicate %v error %v", i, seq, dup, err)
		}
	}
	if seq, dup, err := publish("acks.b", "id-1", ""); err != nil || dup || seq != 3 {
		t.Fatalf("first with an ID: seq %d duplicate %v error %v", seq, dup, err)
	}
	if seq, dup, err := publish("acks.b", "id-1", ""); err != nil || !dup || seq != 3 {
		t.Fatalf("same ID again: seq %d duplicate %v error %v", seq, dup, err)
	}
	var apiErr *jetstream.APIError
	if _, _, err := publish("acks.a", "", "1"); !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence || !errors.Is(err, transport.ErrWrongLastSequence) {
		t.Fatalf("failed condition: %v", err)
	}
	if seq, _, err := publish("acks.a", "", "2"); err != nil || seq != 4 {
		t.Fatalf("condition met: seq %d error %v", seq, err)
	}
	if _, _, err := publish("acks.a", "id-2", "999"); errors.Is(err, transport.ErrNoResponders) || !errors.Is(err, transport.ErrWrongLastSequence) {
		t.Fatalf("failed condition with an ID: %v", err)
	}
	_, _, err := publish("nostream.a", "", "")
	if !errors.Is(err, transport.ErrNoResponders) || !errors.Is(err, jetstream.ErrNoStreamResponse) || !errors.Is(err, nats.ErrNoResponders) || errors.Is(err, transport.ErrWrongLastSequence) {
		t.Fatalf("no stream: %v", err)
	}
}

// PublishThen hands the acknowledgement to a function instead: stored, and
// no stream at all. An answer that never comes is an expiry; expectations
// still open when the inbox closes get nil.
func TestPublishThenAndExpectations(t *testing.T) {
	t.Parallel()
	nc, p := streamAndPublisher(t, "then")
	ctx := testenv.Context(t)
	type outcome struct {
		seq uint64
		err error
	}
	publish := func(subject string) outcome {
		t.Helper()
		got := make(chan outcome, 1)
		msg := nats.NewMsg(subject)
		msg.Data = []byte("x")
		if err := p.PublishThen(msg, time.Minute, func(seq uint64, _ bool, err error) { got <- outcome{seq, err} }); err != nil {
			t.Fatal(err)
		}
		select {
		case o := <-got:
			return o
		case <-ctx.Done():
			t.Fatal("no outcome")
			return outcome{}
		}
	}
	if o := publish("then.a"); o.err != nil || o.seq != 1 {
		t.Fatalf("stored: %+v", o)
	}
	if o := publish("nostream.a"); !errors.Is(o.err, transport.ErrNoResponders) {
		t.Fatalf("no stream: %+v", o)
	}

	inbox := transport.NewInbox(nc)
	expired := make(chan *nats.Msg, 1)
	if _, _, err := inbox.Expect(time.Millisecond, func(m *nats.Msg) { expired <- m }); err != nil {
		t.Fatal(err)
	}
	open := make(chan *nats.Msg, 1)
	if _, _, err := inbox.Expect(time.Hour, func(m *nats.Msg) { open <- m }); err != nil {
		t.Fatal(err)
	}
	cancelled := make(chan *nats.Msg, 1)
	subject, cancel, err := inbox.Expect(time.Millisecond, func(m *nats.Msg) { cancelled <- m })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	answered := make(chan *nats.Msg, 1)
	answer, _, err := inbox.Expect(time.Hour, func(m *nats.Msg) { answered <- m })
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{answer, answer, subject} {
		if err := nc.Publish(s, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	for name, ch := range map[string]chan *nats.Msg{"expired": expired, "answered": answered} {
		select {
		case m := <-ch:
			if (name == "expired") != (m == nil) {
				t.Fatalf("%s expectation got %v", name, m)
			}
		case <-ctx.Done():
			t.Fatalf("%s expectation got nothing", name)
		}
	}
	inbox.Close()
	select {
	case m := <-open:
		if m != nil {
			t.Fatalf("open expectation got %v at close", m)
		}
	case <-ctx.Done():
		t.Fatal("open expectation got nothing at close")
	}
	// Each is called once at most; the cancelled one never.
	select {
	case m := <-answered:
		t.Fatalf("answered twice: %v", m)
	case m := <-cancelled:
		t.Fatalf("cancelled expectation called with %v", m)
	default:
	}
}

// A registered subject receives its own messages, as many as its buffer
// holds until they are read, and none once done.
func TestInboxRegister(t *testing.T) {
	t.Parallel()
	nc, _ := streamAndPublisher(t, "register")
	inbox := transport.NewInbox(nc)
	t.Cleanup(inbox.Close)
	mine, ch, done, err := inbox.Register(2)
	if err != nil {
		t.Fatal(err)
	}
	other, otherCh, otherDone, err := inbox.Register(1)
	if err != nil {
		t.Fatal(err)
	}
	defer otherDone()
	if mine == other {
		t.Fatalf("two registrations share subject %s", mine)
	}
	for _, data := range []string{"1", "2", "3"} {
		if err := nc.Publish(mine, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	// The message to the other subject comes after the three: once it is
	// there, so are they, or were dropped.
	if err := nc.Publish(other, []byte("other")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-otherCh:
		if string(m.Data) != "other" {
			t.Fatalf("other subject got %q", m.Data)
		}
	case <-testenv.Context(t).Done():
		t.Fatal("other subject got nothing")
	}
	var got []string
	for len(ch) > 0 {
		got = append(got, string((<-ch).Data))
	}
	if strings.Join(got, ",") != "1,2" {
		t.Fatalf("buffer of two got %v", got)
	}
	done()
	if err := nc.Publish(mine, []byte("late")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(other, []byte("after late")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-otherCh:
	case <-testenv.Context(t).Done():
		t.Fatal("other subject got nothing after done")
	}
	if len(ch) != 0 {
		t.Fatalf("message after done: %q", (<-ch).Data)
	}
}

// PublishRetrying sends again a message that no stream stored (here, until
// the stream exists), and a message with an ID that got no acknowledgement
// (here from a subscriber that swallows the first copy, standing for a
// stream leader that hangs); a message without an ID that got none is sent
// once.
func TestPublishRetrying(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	nc := testenv.Connect(t, srv.URL())
	inbox := transport.NewInbox(nc)
	t.Cleanup(inbox.Close)
	p := transport.NewPublisher(nc, inbox)
	ctx := testenv.Context(t)
	fast := transport.RetryPolicy{Attempt: 200 * time.Millisecond, Initial: time.Millisecond, Max: 10 * time.Millisecond}

	// Stream "LATE" is created once the first publish found none.
	refused := make(chan struct{})
	watcher := testenv.Connect(t, srv.URL())
	var once sync.Once
	if _, err := watcher.Subscribe("late.>", func(*nats.Msg) { once.Do(func() { close(refused) }) }); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-refused
		_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
	}()
	// The watcher makes the subject have a responder, so the publish is
	// not refused as no responders but goes unanswered: with an ID, it is
	// sent again and stored once the stream exists.
	msg := nats.NewMsg("late.a")
	msg.Header.Set(jetstream.MsgIDHeader, "m1")
	seq, dup, err := p.PublishRetrying(ctx, fast, msg)
	if err != nil || seq != 1 || dup {
		t.Fatalf("publish with an ID: seq %d duplicate %v error %v", seq, dup, err)
	}

	// No stream at all: sent again until the caller's deadline.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, _, err := p.PublishRetrying(short, fast, nats.NewMsg("nostream.a")); !errors.Is(err, transport.ErrNoResponders) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish to no stream: %v", err)
	}

	var copies atomic.Int32
	if _, err := watcher.Subscribe("silent.>", func(*nats.Msg) { copies.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, _, err := p.PublishRetrying(short, fast, nats.NewMsg("silent.a")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish without an ID nobody acknowledges: %v", err)
	}
	if n := copies.Load(); n != 1 {
		t.Fatalf("a message without an ID was sent %d times", n)
	}
}

// An expectation open when the connection is lost ends at once, not at its
// timeout: the answer may never come, and the write is safe to send again.
func TestExpectationEndsWhenTheConnectionIsLost(t *testing.T) {
	srv := testenv.Server(t)
	nc := testenv.Connect(t, srv.URL())
	inbox := transport.NewInbox(nc)
	defer inbox.Close()
	got := make(chan *nats.Msg, 1)
	if _, _, err := inbox.Expect(time.Hour, func(m *nats.Msg) { got <- m }); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	select {
	case m := <-got:
		if m != nil {
			t.Fatalf("expectation got a message %v, want nil", m)
		}
	case <-testenv.Context(t).Done():
		t.Fatal("expectation still open after the connection was lost")
	}
}

// On a replicated stream, a conditional publish that arrives while
// another conditional write on the subject its condition names is being
// replicated is refused with 10164: nothing stored, the condition not
// checked. It is ErrWriteInProcess, transient, and never
// ErrWrongLastSequence, the answer of a condition that failed; and
// PublishRetrying stores it once the other write is in.
func TestConditionalWriteInProcessOnAReplicatedStream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	urls := testenv.Cluster(t, 3)
	nc := testenv.Connect(t, urls)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "INPROCESS", Subjects: []string{"inprocess.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	inbox := transport.NewInbox(nc)
	t.Cleanup(inbox.Close)
	p := transport.NewPublisher(nc, inbox)
	conditional := func(subject, filter string) *nats.Msg {
		msg := nats.NewMsg(subject)
		msg.Data = []byte("x")
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, filter)
		return msg
	}
	// A stream just made may answer nothing for a moment on a cluster
	// (its subjects' interest reaches the other nodes after it): the
	// writes measured start once one write was stored.
	warm := nats.NewMsg("inprocess.warm")
	warm.Data = []byte("x")
	if _, _, err := p.PublishRetrying(ctx, transport.WritePolicy, warm); err != nil {
		t.Fatal(err)
	}
	inProcess := 0
	for i := range 200 {
		filter := "inprocess." + strconv.Itoa(i) + ".result"
		// The first write's condition is on the second's subject, as a
		// call's start is on its result's; both are sent at once.
		first := make(chan error, 1)
		if err := p.PublishThen(conditional("inprocess."+strconv.Itoa(i)+".started", filter), testenv.Patience, func(_ uint64, _ bool, err error) { first <- err }); err != nil {
			t.Fatal(err)
		}
		_, _, err := p.PublishWait(ctx, conditional(filter, filter))
		if err := <-first; err != nil {
			t.Fatalf("write %d, the first: %v", i, err)
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, transport.ErrWriteInProcess):
			inProcess++
		default:
			t.Fatalf("write %d, the second: %v, want stored or ErrWriteInProcess", i, err)
		}
		var apiErr *jetstream.APIError
		if errors.Is(err, transport.ErrWrongLastSequence) || !transport.Transient(err) || !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			t.Fatalf("the in-process refusal %v: wrong last sequence %v, transient %v", err, errors.Is(err, transport.ErrWrongLastSequence), transport.Transient(err))
		}
		if _, _, err := p.PublishRetrying(ctx, transport.WritePolicy, conditional(filter, filter)); err != nil {
			t.Fatalf("write %d again: %v", i, err)
		}
	}
	if inProcess == 0 {
		t.Skip("no write of the 200 met another in process; the case was not exercised")
	}
	t.Logf("%d of 200 writes met another in process", inProcess)
}
