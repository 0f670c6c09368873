package ledger_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// TestEventsAfterReadsTheCallsOwnEventsInOrder: the call's events after a
// sequence come oldest first, whether or not another namespace's event
// under the call's ID comes first after it, bounded by max and by the
// stored size, with always at least one event; nothing after the last is
// an empty answer, not an error. A read is complete only when nothing cut
// it short.
func TestEventsAfterReadsTheCallsOwnEventsInOrder(t *testing.T) {
	t.Parallel()
	l, forger, ctx := setupLedgers(t)
	const id = "call-after"
	b := messages.TurnBucket("")
	req := &messages.CallRequest{CallID: id, Tool: "demo-echo", Namespace: "demo", Method: "echo", QueuedAt: time.Now().UTC()}
	queued, err := l.Append(ctx, "", "demo", &messages.CallEvent{CallID: id, Kind: messages.EventQueued, Time: req.QueuedAt, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	// Another namespace's event first after the queued one, then the
	// call's own, interleaved with another call's.
	forged, err := forger.Append(ctx, b, "payments", &messages.CallEvent{CallID: id, Kind: messages.EventLog, Time: time.Now().UTC(), Log: &messages.LogEntry{Level: "info", Message: "forged"}})
	if err != nil {
		t.Fatal(err)
	}
	var own []uint64
	for i := range 5 {
		if _, err := l.Append(ctx, b, "demo", &messages.CallEvent{CallID: "other-call", Kind: messages.EventLog, Time: time.Now().UTC(), Log: &messages.LogEntry{Level: "info", Message: "other"}}); err != nil {
			t.Fatal(err)
		}
		seq, err := l.Append(ctx, b, "demo", &messages.CallEvent{CallID: id, Kind: messages.EventLog, Time: time.Now().UTC(), Log: &messages.LogEntry{Level: "info", Message: fmt.Sprintf("line %d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		own = append(own, seq)
	}
	read := func(after uint64, max, maxBytes int) ([]uint64, bool) {
		t.Helper()
		events, complete, err := l.EventsAfter(ctx, b, "demo", id, after, max, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, ev := range events {
			if ev.Namespace != "demo" || ev.Log == nil || !strings.HasPrefix(ev.Log.Message, "line ") {
				t.Fatalf("read %+v, not one of the call's own lines", ev.CallEvent)
			}
			got = append(got, ev.Seq)
		}
		return got, complete
	}
	for _, c := range []struct {
		name          string
		after         uint64
		max, maxBytes int
		want          []uint64
		complete      bool
	}{
		{"all after the queued event", queued, 256, 0, own, true},
		{"at most two", forged, 2, 0, own[:2], false},
		{"from the middle", own[1], 256, 0, own[2:], true},
		{"one byte's worth is still one event", forged, 256, 1, own[:1], false},
		{"nothing after the last", own[4], 256, 0, nil, true},
		// The forged event counts against max: the read stops before the
		// stream's end.
		{"max reached with a skipped event", queued, 6, 0, own, false},
	} {
		if got, complete := read(c.after, c.max, c.maxBytes); fmt.Sprint(got) != fmt.Sprint(c.want) || complete != c.complete {
			t.Errorf("%s: read %v (complete %v), want %v (complete %v)", c.name, got, complete, c.want, c.complete)
		}
	}
}
