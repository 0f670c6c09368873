package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// attemptBound is the SDK's bound per attempt in the hung-coordinator
// test; coordinatorWait the time it gives a coordinator to wait for
// JetStream, on top of the bound, in a request it cannot send twice.
const (
	attemptBound    = time.Second
	coordinatorWait = time.Second
)

// requestLog counts the attempts the SDK sends, seen by a plain
// subscriber to the API subjects (it receives a copy of each request
// beside the coordinator that gets it), by endpoint and by a field that
// each request of the test makes unique.
type requestLog struct {
	nc   *nats.Conn
	msgs chan *nats.Msg
	seen map[string]int
}

func newRequestLog(t *testing.T, url string) *requestLog {
	t.Helper()
	l := &requestLog{nc: testenv.Connect(t, url), msgs: make(chan *nats.Msg, 8192), seen: map[string]int{}}
	if _, err := l.nc.ChanSubscribe(names.APIGroup()+".>", l.msgs); err != nil {
		t.Fatal(err)
	}
	if err := l.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// attempts returns how many requests with the marker went to the
// endpoint. A flush makes every request sent before it reach the channel.
func (l *requestLog) attempts(t *testing.T, endpoint, marker string) int {
	t.Helper()
	if err := l.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case m := <-l.msgs:
			var f struct {
				Turn   string `json:"turn"`
				CallID string `json:"call_id"`
				Agent  string `json:"agent"`
			}
			if err := json.Unmarshal(m.Data, &f); err != nil {
				t.Fatalf("request on %s: %v", m.Subject, err)
			}
			ep := strings.TrimPrefix(m.Subject, names.APIGroup()+".")
			for _, field := range []string{f.Turn, f.CallID, f.Agent} {
				if field != "" {
					l.seen[ep+" "+field]++
				}
			}
			continue
		default:
		}
		return l.seen[endpoint+" "+marker]
	}
}

// timing is how long one request of the test took.
type timing struct {
	endpoint, marker string
	took             time.Duration
	err              error
	// extra is time the request may take beyond its attempts and pauses,
	// e.g. a call's wait for its result.
	extra time.Duration
}

// TestHungCoordinatorDoesNotHoldCallers stops one of two coordinators
// with SIGSTOP: a hung peer, not a dead one, so the requests the queue
// group gives it go unanswered. Calls, idempotent calls, calls.get,
// turns.get and tools.list made through the SDK, with a caller deadline of
// 30s and a bound of 1s per attempt, all succeed, and none waits longer
// than its attempts (each at most the bound) and the pauses between them.
// A plain submit that went to the hung coordinator is sent again, as the
// SDK names its call ID, and its call runs once.
func TestHungCoordinatorDoesNotHoldCallers(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	runs := newCounter()
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{runs.tool()}})
	bin := testenv.Binary(t, "./cmd/coordinator")
	hung := testenv.Start(t, bin, "--server", srv.URL())
	hung.WaitLine(t, "coordinator started")
	live := testenv.Start(t, bin, "--server", srv.URL())
	live.WaitLine(t, "coordinator started")
	if err := hung.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Registered after Start's cleanup, so it runs before the kill.
	t.Cleanup(func() { _ = hung.Cmd.Process.Signal(syscall.SIGCONT) })

	log := newRequestLog(t, srv.URL())
	c := testenv.Client(t, srv.URL(), client.Options{Codec: messages.JSONCodec, RequestTimeout: attemptBound, CoordinatorWait: coordinatorWait})
	const each = 12
	var mu sync.Mutex
	var timings []timing
	var wg sync.WaitGroup
	// run starts n requests, each with a caller deadline of 30s, to record
	// how long each takes.
	run := func(endpoint string, n int, extra time.Duration, do func(ctx context.Context, i int) (marker string, err error)) {
		for i := range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				start := time.Now()
				marker, err := do(ctx, i)
				took := time.Since(start)
				mu.Lock()
				timings = append(timings, timing{endpoint: endpoint, marker: marker, took: took, err: err, extra: extra})
				mu.Unlock()
			})
		}
	}

	callIDs := make([]string, each)
	run(messages.EndpointCallsSubmit, each, 2*time.Second, func(ctx context.Context, i int) (string, error) {
		turn := fmt.Sprintf("plain-%d", i)
		res, err := c.Call(ctx, "t-count", countArgs{Label: turn}, client.WithTurn(turn))
		if err == nil {
			callIDs[i] = res.CallID
			if res.IsError || res.Content[0].Text != turn {
				err = fmt.Errorf("result %+v", res)
			}
		}
		return turn, err
	})
	run(messages.EndpointCallsSubmit, each, 2*time.Second, func(ctx context.Context, i int) (string, error) {
		turn := fmt.Sprintf("idempotent-%d", i)
		res, err := c.Call(ctx, "t-count", countArgs{Label: turn}, client.WithTurn(turn), client.WithIdempotencyKey(turn))
		if err == nil && runs.runs(res.CallID) != 1 {
			err = fmt.Errorf("call %s ran %d times", res.CallID, runs.runs(res.CallID))
		}
		return turn, err
	})
	wg.Wait()
	run(messages.EndpointCallsGet, each, 0, func(ctx context.Context, i int) (string, error) {
		if callIDs[i] == "" {
			return "", errors.New("no call to get")
		}
		info, err := c.Get(ctx, callIDs[i])
		if err == nil && info.State != messages.StateCompleted {
			err = fmt.Errorf("call %s is %s", callIDs[i], info.State)
		}
		return callIDs[i], err
	})
	run(messages.EndpointTurnsGet, each, 0, func(ctx context.Context, i int) (string, error) {
		turn := fmt.Sprintf("plain-%d", i)
		info, err := c.Turn(ctx, turn)
		if err == nil && len(info.Calls) != 1 {
			err = fmt.Errorf("turn %s has %d calls", turn, len(info.Calls))
		}
		return turn, err
	})
	run(messages.EndpointToolsList, each, 0, func(ctx context.Context, i int) (string, error) {
		agent := fmt.Sprintf("lister-%d", i)
		_, err := c.ListTools(ctx, messages.ListToolsRequest{Agent: agent})
		return agent, err
	})
	wg.Wait()

	retried := 0
	longest := map[string]time.Duration{}
	mostAttempts := map[string]int{}
	for _, tm := range timings {
		if tm.err != nil {
			t.Errorf("%s %s failed after %v: %v", tm.endpoint, tm.marker, tm.took, tm.err)
			continue
		}
		n := log.attempts(t, tm.endpoint, tm.marker)
		if n > 1 {
			retried++
		}
		longest[tm.endpoint] = max(longest[tm.endpoint], tm.took)
		mostAttempts[tm.endpoint] = max(mostAttempts[tm.endpoint], n)
		// Each attempt waits at most the bound; the pauses between
		// attempts are at most 1s; a second covers the rest.
		bound := time.Duration(n)*attemptBound + time.Duration(n-1)*time.Second + time.Second + tm.extra
		if n == 0 || tm.took > bound {
			t.Errorf("%s %s took %v in %d attempts; want at most %v", tm.endpoint, tm.marker, tm.took, n, bound)
		}
	}
	t.Logf("%d of %d requests were retried; the longest by endpoint %v, in at most %v attempts", retried, len(timings), longest, mostAttempts)
	if retried == 0 {
		t.Errorf("none of %d requests went to the hung coordinator", len(timings))
	}

	// Plain submits, one at a time, until one goes to the hung coordinator:
	// the SDK names their call IDs, so such a submit is sent again, and the
	// call runs once.
	for i := range 64 {
		turn := fmt.Sprintf("submit-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"s"}`), Turn: turn})
		took := time.Since(start)
		if err == nil {
			_, err = c.Wait(ctx, reply.CallID)
		}
		cancel()
		if err != nil {
			t.Fatalf("submit %s failed after %v: %v", turn, took, err)
		}
		n := log.attempts(t, messages.EndpointCallsSubmit, turn)
		if n == 1 {
			continue
		}
		if bound := time.Duration(n)*(attemptBound+coordinatorWait) + time.Duration(n-1)*time.Second + 2*time.Second; took > bound {
			t.Fatalf("submit %s took %v in %d attempts; want at most %v", turn, took, n, bound)
		}
		if runs := runs.runs(reply.CallID); runs != 1 {
			t.Fatalf("submit %s sent %d times ran its call %d times", turn, n, runs)
		}
		return
	}
	t.Fatal("no plain submit of 64 went to the hung coordinator")
}
