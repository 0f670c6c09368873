package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestResultRightAfterItsStartInACluster: on streams of three replicas a
// call's started event and its result are both written on the condition
// that the call has no result, and a replicated stream refuses the second
// of two such writes while the first is still being replicated (10164).
// A tool that reports progress (which records its start) and returns at
// once makes its result follow its start by microseconds, so most of
// these calls meet that refusal. Each must still end with its result, and
// the namespace's consumer must be left with nothing pending: a worker
// that took the refusal for another attempt's result would acknowledge
// the call without one, and the call would stay running for ever.
func TestResultRightAfterItsStartInACluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	urls := testenv.Cluster(t, 3)
	testenv.Coordinator(t, urls, func(cfg *coordinator.Config) { cfg.Resources.Replicas = 3 })
	quick := worker.Func("quick", "Reports progress and returns at once.", func(ctx context.Context, in struct {
		N int `json:"n"`
	}) (int, error) {
		worker.ReportProgress(ctx, 1, 1, "done")
		return in.N, nil
	})
	testenv.Worker(t, urls, worker.Config{}, worker.Namespace{Name: "q", Slots: 16, Tools: []worker.Tool{quick}})
	c := testenv.Client(t, urls, client.Options{Agent: "bot"})
	const calls, callers = 300, 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
	)
	next := make(chan int)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range next {
				mu.Lock()
				enough := len(failures) >= 5
				mu.Unlock()
				if enough {
					continue // the test has failed already; what is left would wait as long
				}
				// A call here ends in milliseconds on an idle machine; one
				// that waits testenv.Patience lost its result.
				ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
				res, err := c.Call(ctx, "q-quick", map[string]int{"n": n})
				cancel()
				if err != nil || res.Status != messages.StateCompleted {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("call %d: %+v %v", n, res, err))
					mu.Unlock()
				}
			}
		}()
	}
	for n := range calls {
		next <- n
	}
	close(next)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	assertConsumerDrained(t, urls, "q")
}
