package coordinator

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

// causeLedger commits like flakyCommitter and has the call's latest log
// event, as the coordinator's ledger reads it.
type causeLedger struct {
	flakyCommitter
	lastLog *messages.CallEvent
}

func (l *causeLedger) SnapshotIn(_ context.Context, _, callID string) (*ledger.Snapshot, error) {
	snap := &ledger.Snapshot{CallID: callID}
	if l.lastLog != nil {
		snap.Log = &ledger.Event{CallEvent: *l.lastLog, Seq: 3}
		snap.LastSeq = 3
	}
	return snap, nil
}

// TestExhaustedCallCountsItsAttemptsAndGivesTheCause: the sweeper's failure
// of a call whose deliveries ran out counts the attempts, not the
// consumer's extra delivery, and gives the cause the last attempt's worker
// stored; without one, it blames the workers.
func TestExhaustedCallCountsItsAttemptsAndGivesTheCause(t *testing.T) {
	_, nc, js, names := jetStreamEnv(t)
	ctx := context.Background()
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name    string
		lastLog *messages.CallEvent
		want    string
	}{
		{"with a cause", &messages.CallEvent{Kind: messages.EventLog, Attempt: 3, Worker: "w1", Log: &messages.LogEntry{Level: messages.LogRetry, Message: "MCP server fs: transport error: transport closed"}},
			"the call was delivered 3 times and no attempt finished; attempt 3 asked for another because: MCP server fs: transport error: transport closed"},
		{"a tool's own log line is no cause", &messages.CallEvent{Kind: messages.EventLog, Attempt: 3, Log: &messages.LogEntry{Level: "info", Message: "halfway"}},
			"the call was delivered 3 times and no attempt finished: the workers that took it stopped"},
		{"without a log", nil, "the call was delivered 3 times and no attempt finished: the workers that took it stopped"},
	} {
		call := &messages.CallRequest{CallID: "exhausted" + strconv.Itoa(i), Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: time.Now().UTC()}
		ack, err := js.PublishMsg(ctx, queuedEventMsg(t, names, call))
		if err != nil {
			t.Fatal(err)
		}
		l := &causeLedger{lastLog: tc.lastLog}
		s := &sweeper{stream: &callStream{nc: nc, names: names, stream: stream, log: discardLogger()}, ledger: l, unavailableWait: 20 * time.Millisecond, log: discardLogger()}
		// MaxAttempts 3: the consumer's MaxDeliver is 4.
		s.endExhausted(ctx, maxDeliveriesAdvisory{Stream: names.EventsStream(), StreamSeq: ack.Sequence, Deliveries: 4})
		if len(l.committed) != 1 {
			t.Fatalf("%s: committed %d results", tc.name, len(l.committed))
		}
		res := l.committed[0]
		if res.Attempt != 3 || res.Error.Code != messages.ResultAttempts || !strings.HasPrefix(res.Error.Message, tc.want) {
			t.Errorf("%s: attempt %d, error %+v; want attempt 3 and %q", tc.name, res.Attempt, res.Error, tc.want)
		}
	}
}

// queuedEventMsg is the queued event of call, as the coordinator queues it.
func queuedEventMsg(t *testing.T, names messages.Names, call *messages.CallRequest) *nats.Msg {
	t.Helper()
	subject, err := names.Events().Queued(call.CallID, call.Turn, call.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := newMsg(subject, &messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Time: call.QueuedAt, Request: call})
	if err != nil {
		t.Fatal(err)
	}
	msg.Header.Set(messages.HeaderMsgID, queuedMsgID(call.CallID))
	return msg
}
