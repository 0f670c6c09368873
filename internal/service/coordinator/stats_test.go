package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestCallStatsOfRealCalls: stats.calls answers, for calls a worker ran,
// how many were queued, ran and completed in the window, their queue
// waits and run times by namespace, and the namespace's queue depth the
// coordinator's sweeps sampled: with one slot and three calls of a tool
// that waits, one delivered and two waiting.
func TestCallStatsOfRealCalls(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.SweepInterval = 50 * time.Millisecond })
	release := make(chan struct{})
	hold := worker.Func("hold", "Waits to be released.", func(ctx context.Context, _ struct{}) (string, error) {
		select {
		case <-release:
			return "released", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "slow", Tools: []worker.Tool{hold}, Slots: 1})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)

	var ids []string
	for range 3 {
		reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: "slow-hold", Arguments: messages.JSON(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, reply.CallID)
	}
	var stats *messages.CallStatsReply
	var err error
	deadline := time.Now().Add(testenv.Patience)
	for {
		stats, err = c.Operator().CallStats(ctx, messages.CallStatsRequest{Namespace: "slow"})
		if err != nil {
			t.Fatal(err)
		}
		if d := depth(stats); d != nil && d.Waiting == 2 && d.Delivered == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample of slow's queue with 1 call delivered and 2 waiting: %+v", depth(stats))
		}
		time.Sleep(20 * time.Millisecond) // the sweeps sample the queue every 50ms; nothing signals one
	}
	// The deepest queue of the minutes sampled: the last one's, unless
	// a minute began between the sample and the read.
	var deepest int64
	for _, m := range stats.Namespaces[0].Minutes {
		if m.QueueDepth != nil {
			deepest = max(deepest, *m.QueueDepth)
		}
	}
	if deepest != 3 {
		t.Errorf("the minutes' deepest queue: %d, want 3", deepest)
	}
	if got := counted(stats); got[messages.StateQueued] != 3 {
		t.Errorf("while the calls wait: %v, want 3 queued", got)
	}

	close(release)
	for _, id := range ids {
		res, err := c.Wait(ctx, id)
		if err != nil || res.Status != messages.StateCompleted {
			t.Fatalf("call %s: %+v %v", id, res, err)
		}
	}
	stats, err = c.Operator().CallStats(ctx, messages.CallStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[messages.CallState]int{messages.StateQueued: 3, messages.StateRunning: 3, messages.StateCompleted: 3}
	if got := counted(stats); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("once the calls completed: %v, want %v", got, want)
	}
	// The built-in namespace llm_tools has a queue too, sampled, empty.
	if len(stats.Namespaces) == 0 || stats.Namespaces[0].Namespace != "slow" {
		t.Fatalf("namespaces %+v, want slow first", stats.Namespaces)
	}
	if slow := stats.Namespaces[0]; slow.Ended != 3 || slow.RunMS == nil || slow.RunMS.Count != 3 || slow.QueueWaitMS == nil || slow.QueueWaitMS.Count != 3 {
		t.Errorf("slow: %d ended, run times %+v, queue waits %+v; want 3 of each", slow.Ended, slow.RunMS, slow.QueueWaitMS)
	}
}

func depth(stats *messages.CallStatsReply) *messages.QueueDepth {
	if len(stats.Namespaces) != 1 {
		return nil
	}
	return stats.Namespaces[0].QueueDepth
}

func counted(stats *messages.CallStatsReply) map[messages.CallState]int {
	sum := map[messages.CallState]int{}
	for _, m := range stats.Minutes {
		for st, n := range m.States {
			sum[st] += n
		}
	}
	return sum
}
