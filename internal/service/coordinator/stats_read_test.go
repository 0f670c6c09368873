package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// statsOn returns a stats.calls reader of the events stream log reads,
// with a budget of events and of bytes.
func statsOn(log *callLog, budget, maxBytes int) *statsReader {
	return &statsReader{log: log, budget: budget, maxBytes: maxBytes}
}

// sumStates adds up the minutes' counts of each state.
func sumStates(reply *messages.CallStatsReply) map[messages.CallState]int {
	sum := map[messages.CallState]int{}
	for _, m := range reply.Minutes {
		for st, n := range m.States {
			sum[st] += n
		}
	}
	return sum
}

func namespaceOf(reply *messages.CallStatsReply, ns string) *messages.NamespaceStats {
	for i := range reply.Namespaces {
		if reply.Namespaces[i].Namespace == ns {
			return &reply.Namespaces[i]
		}
	}
	return nil
}

// TestCallStatsReadsTheEventsStream: stats.calls counts the events the
// events stream stored in the window: each call's queued, started and
// result events, a held call's queued event as awaiting_approval, and a
// result another namespace forged under its own subject in that
// namespace, not in the call's.
func TestCallStatsReadsTheEventsStream(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	ctx := context.Background()
	for i := range 5 {
		storeCall(ctx, t, l, fmt.Sprintf("call%d", i), "alpha", messages.StateCompleted)
	}
	storeCall(ctx, t, l, "broke", "beta", messages.StateFailed)
	forged := &messages.CallResult{CallID: "call0", Status: messages.StateFailed, FinishedAt: time.Now().UTC()}
	if _, err := l.Append(ctx, messages.TurnBucket(""), "mallory", &messages.CallEvent{CallID: "call0", Kind: messages.EventResult, Time: time.Now().UTC(), Result: forged}); err != nil {
		t.Fatal(err)
	}
	storeApprovedCall(ctx, t, l, "held", "alpha")

	reply, err := statsOn(log, StatsScanBudget, statsScanBytes).read(ctx, &messages.CallStatsRequest{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Minutes) != messages.DefaultStatsMinutes || !reply.CountedSince.Equal(reply.Since) || reply.Scanned != 21 {
		t.Fatalf("%d minutes, counted since %s (window since %s), %d events scanned; want 60, the window's start, 21",
			len(reply.Minutes), reply.CountedSince, reply.Since, reply.Scanned)
	}
	want := map[messages.CallState]int{
		messages.StateQueued: 6, messages.StateRunning: 6, messages.StateCompleted: 5, messages.StateFailed: 2,
		messages.StateAwaitingApproval: 1,
	}
	if got := sumStates(reply); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states %v, want %v", got, want)
	}
	alpha, beta, mallory := namespaceOf(reply, "alpha"), namespaceOf(reply, "beta"), namespaceOf(reply, "mallory")
	if alpha == nil || beta == nil || mallory == nil || len(reply.Namespaces) != 3 {
		t.Fatalf("namespaces %+v, want alpha, beta and mallory", reply.Namespaces)
	}
	if alpha.Ended != 5 || alpha.Active != 16 || alpha.RunMS == nil || alpha.RunMS.Count != 5 || alpha.QueueWaitMS.Count != 5 {
		t.Errorf("alpha: %+v", alpha)
	}
	if mallory.Ended != 1 || mallory.Active != 1 || mallory.RunMS != nil {
		t.Errorf("mallory, whose one result was forged: %+v", mallory)
	}
	if reply.Namespaces[0].Namespace != "alpha" {
		t.Errorf("the busiest namespace is listed %s first", reply.Namespaces[0].Namespace)
	}

	// Of one namespace; and a window that starts after every event.
	only, err := statsOn(log, StatsScanBudget, statsScanBytes).read(ctx, &messages.CallStatsRequest{Namespace: "beta", Minutes: 5}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := sumStates(only); len(only.Namespaces) != 1 || len(only.Minutes) != 5 || fmt.Sprint(got) != fmt.Sprint(map[messages.CallState]int{
		messages.StateQueued: 1, messages.StateRunning: 1, messages.StateFailed: 1,
	}) {
		t.Errorf("beta alone: %v, namespaces %+v", got, only.Namespaces)
	}
	later, err := statsOn(log, StatsScanBudget, statsScanBytes).read(ctx, &messages.CallStatsRequest{Minutes: 1}, time.Now().Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := sumStates(later); len(got) != 0 || len(later.Namespaces) != 0 || later.Scanned != 0 {
		t.Errorf("a window after every event: %v, %+v, %d scanned", got, later.Namespaces, later.Scanned)
	}
}

// TestCallStatsScanBudget: a scan whose budget runs out counts the newest
// events it could read, and says since when it counted them; one whose
// bytes run out within a window counts nothing of that window.
func TestCallStatsScanBudget(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	ctx := context.Background()
	for i := range 5 {
		storeCall(ctx, t, l, fmt.Sprintf("call%d", i), "alpha", messages.StateCompleted)
	}
	reply, err := statsOn(log, 7, statsScanBytes).read(ctx, &messages.CallStatsRequest{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The newest 7 of the 15 events: call4 and call3 whole, call2's
	// result, which says when call2 started.
	want := map[messages.CallState]int{messages.StateQueued: 2, messages.StateRunning: 3, messages.StateCompleted: 3}
	if got := sumStates(reply); reply.Scanned != 7 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("with a budget of 7 events: %d scanned, %v; want 7, %v", reply.Scanned, got, want)
	}
	if !reply.CountedSince.After(reply.Since) || reply.CountedSince.After(reply.Until) {
		t.Errorf("counted since %s, in a window from %s to %s: want a time within it", reply.CountedSince, reply.Since, reply.Until)
	}
	whole, err := statsOn(log, StatsScanBudget, statsScanBytes).read(ctx, &messages.CallStatsRequest{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !whole.CountedSince.Equal(whole.Since) || whole.Scanned != 15 {
		t.Errorf("with the whole budget: counted since %s (window since %s), %d scanned", whole.CountedSince, whole.Since, whole.Scanned)
	}

	tight, err := statsOn(log, StatsScanBudget, 100).read(ctx, &messages.CallStatsRequest{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := sumStates(tight); len(got) != 0 || tight.Scanned != 0 || !tight.CountedSince.Equal(tight.Until) {
		t.Errorf("with 100 bytes: %v, %d scanned, counted since %s (until %s); want nothing counted", got, tight.Scanned, tight.CountedSince, tight.Until)
	}
}
