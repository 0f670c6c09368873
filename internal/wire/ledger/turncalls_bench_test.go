package ledger

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// BenchmarkTurnCalls measures how a turn's calls are found (turns.get's
// read) in an events stream holding many calls: the queued events of
// TOOLBUS_BENCH_CALLS calls (100,000 by default; 1,000,000 for the
// figures in docs/BENCHMARKS.md) with their results, in 1,000 turns. A
// young turn began just before its 8 calls, the last ones stored; an old
// turn began before the first call and has 8 calls spread over the
// stream. The cost of a turn's read grows with the events stored since it
// began.
//
//	TOOLBUS_BENCH_CALLS=1000000 go test -run x -bench TurnCalls -benchtime 20x ./internal/wire/ledger
func BenchmarkTurnCalls(b *testing.B) {
	calls := 100_000
	if v := os.Getenv("TOOLBUS_BENCH_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		calls = n
	}
	nc := embedded.Connect(b, embedded.Server(b).URL())
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	names := messages.MustNames("")
	ctx := context.Background()
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		b.Fatal(err)
	}
	l := New(nc, js, names)
	b.Cleanup(l.Close)
	// Each turn's first sequence, as its record keeps it.
	old, err := l.Turns().LastSeq(ctx)
	if err != nil {
		b.Fatal(err)
	}
	old++
	publish := func(id, turn string) {
		req := &messages.CallRequest{CallID: id, Tool: "t-echo", Namespace: "t", Method: "echo", Turn: turn, Arguments: messages.JSON(`{"text":"hello"}`)}
		for _, ev := range []*messages.CallEvent{
			{CallID: id, Kind: messages.EventQueued, Request: req},
			{CallID: id, Kind: messages.EventResult, Result: &messages.CallResult{CallID: id, Tool: "t-echo", Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("hello")}}},
		} {
			msg, err := l.EventMsg(messages.TurnBucket(turn), "t", ev)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := js.PublishMsgAsync(msg); err != nil {
				b.Fatal(err)
			}
		}
	}
	spread := max(calls/8, 1)
	for i := range calls {
		turn := "turn-" + strconv.Itoa(i%1000)
		if i%spread == 0 {
			turn = "old"
		}
		publish(fmt.Sprintf("c%d", i), turn)
		if i%1_000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	young, err := l.Turns().LastSeq(ctx)
	if err != nil {
		b.Fatal(err)
	}
	young++
	for i := range 8 {
		publish(fmt.Sprintf("y%d", i), "young")
	}
	<-js.PublishAsyncComplete()
	for _, tc := range []struct {
		turn string
		from uint64
	}{{"young", young}, {"old", old}} {
		b.Run(tc.turn, func(b *testing.B) {
			for b.Loop() {
				ids, err := l.Turns().TurnCalls(ctx, tc.turn, tc.from, 10_000)
				if err != nil || len(ids) != 8 {
					b.Fatalf("%d calls (%v), want 8", len(ids), err)
				}
			}
		})
	}
}
