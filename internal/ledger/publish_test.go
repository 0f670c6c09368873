package ledger_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Publish reads JetStream's acknowledgements itself: stored, duplicate,
// refused by a condition, and no stream at all.
func TestPublishReadsAcknowledgements(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ACKS", Subjects: []string{"acks.>"}}); err != nil {
		t.Fatal(err)
	}
	l := ledger.New(nc, js, messages.MustNames(""))
	defer l.Close()
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
		pending, err := l.Publish(msg)
		if err != nil {
			t.Fatal(err)
		}
		return pending.Wait(ctx)
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
	if _, _, err := publish("acks.a", "", "1"); !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("failed condition: %v", err)
	}
	if _, _, err := publish("nostream.a", "", ""); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("no stream: %v", err)
	}
}
