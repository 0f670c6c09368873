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

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
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

// TestHungCoordinatorDoesNotHoldCallers stops one of two coordinators
// with SIGSTOP: a hung peer, not a dead one, so the requests the queue
// group gives it go unanswered, and a request whose attempt waits for an
// answer from it waits out the attempt's bound (RequestTimeout, a minute
// here). Calls, idempotent calls, submits, calls.get, turns.get and
// tools.list made through the SDK, each with a caller deadline of 30s —
// less than one attempt, and room for a busy machine — all succeed: the SDK sends copies of what is safe to repeat
// to the other coordinator after HedgeAfter, and a call runs once. It is
// run for a client that reads the events stream, and for one that follows
// its calls through the coordinators (CoordinatorReads), as an agent's
// user with identities does.
func TestHungCoordinatorDoesNotHoldCallers(t *testing.T) {
	t.Parallel()
	// deadline is each request's: less than one attempt's bound, so that
	// a request whose only copy went to the hung coordinator fails; both
	// are long, so that a busy machine's slowness does not.
	const attempt, deadline = time.Minute, 30 * time.Second
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
	clients := map[string]*client.Client{
		"stream reads":      testenv.Client(t, srv.URL(), client.Options{Codec: messages.JSONCodec, Agent: "bot", RequestTimeout: attempt}),
		"coordinator reads": testenv.Client(t, srv.URL(), client.Options{Codec: messages.JSONCodec, Agent: "bot", CoordinatorReads: true, Route: "hungroute0000000000001", RequestTimeout: attempt}),
	}
	const each = 8
	for name, c := range clients {
		var mu sync.Mutex
		var failures []string
		// slowest is, by kind, the longest a request took: a figure, not
		// asserted (docs/BENCHMARKS.md).
		slowest := map[string]time.Duration{}
		var wg sync.WaitGroup
		run := func(what string, n int, do func(ctx context.Context, i int) error) {
			for i := range n {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					start := time.Now()
					err := do(ctx, i)
					took := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failures = append(failures, fmt.Sprintf("%s %s %d: %v", name, what, i, err))
					}
					slowest[what] = max(slowest[what], took)
				})
			}
		}
		prefix := strings.ReplaceAll(name, " ", "-")
		callIDs := make([]string, each)
		run("call", each, func(ctx context.Context, i int) error {
			turn := fmt.Sprintf("%s-plain-%d", prefix, i)
			res, err := c.Call(ctx, "t-count", countArgs{Label: turn}, client.WithTurn(turn))
			if err != nil {
				return err
			}
			callIDs[i] = res.CallID
			if res.IsError || res.Content[0].Text != turn {
				return fmt.Errorf("result %+v", res)
			}
			return nil
		})
		run("idempotent call", each, func(ctx context.Context, i int) error {
			turn := fmt.Sprintf("%s-idempotent-%d", prefix, i)
			_, err := c.Call(ctx, "t-count", countArgs{Label: turn}, client.WithTurn(turn), client.WithIdempotencyKey(turn))
			return err
		})
		run("submit", each, func(ctx context.Context, i int) error {
			turn := fmt.Sprintf("%s-submit-%d", prefix, i)
			reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"s"}`), Turn: turn})
			if err != nil {
				return err
			}
			_, err = c.Wait(ctx, reply.CallID)
			return err
		})
		wg.Wait()
		run("calls.get", each, func(ctx context.Context, i int) error {
			if callIDs[i] == "" {
				return errors.New("no call to get")
			}
			info, err := c.Get(ctx, callIDs[i])
			if err == nil && info.State != messages.StateCompleted {
				err = fmt.Errorf("call %s is %s", callIDs[i], info.State)
			}
			return err
		})
		run("turns.get", each, func(ctx context.Context, i int) error {
			turn := fmt.Sprintf("%s-plain-%d", prefix, i)
			info, err := c.Turn(ctx, turn)
			if err == nil && len(info.Calls) != 1 {
				err = fmt.Errorf("turn %s has %d calls", turn, len(info.Calls))
			}
			return err
		})
		run("tools.list", each, func(ctx context.Context, i int) error {
			_, err := c.ListTools(ctx, messages.ListToolsRequest{Agent: fmt.Sprintf("%s-lister-%d", prefix, i)})
			return err
		})
		wg.Wait()
		for _, f := range failures {
			t.Error(f)
		}
		t.Logf("%s, one coordinator of two hung: the slowest of %d of each: %v", name, each, slowest)
	}
	runs.mu.Lock()
	for id, n := range runs.calls {
		if n != 1 {
			t.Errorf("call %s ran %d times", id, n)
		}
	}
	runs.mu.Unlock()
	// The hung coordinator had its share of the requests: some had to be
	// sent again, so the test did not pass by chance.
	copies, requests := 0, 0
	for name := range clients {
		prefix := strings.ReplaceAll(name, " ", "-")
		for i := range each {
			for _, kind := range []string{"plain", "idempotent", "submit"} {
				if n := log.attempts(t, messages.EndpointCallsSubmit, fmt.Sprintf("%s-%s-%d", prefix, kind, i)); n > 0 {
					copies += n
					requests++
				}
			}
		}
	}
	t.Logf("%d submits sent as %d copies", requests, copies)
	if copies <= requests {
		t.Errorf("none of %d submits went unanswered to the hung coordinator", requests)
	}
}
