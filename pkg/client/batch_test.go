package client_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// anthropicCalls is the content of a model message calling t-count once per label.
func anthropicCalls(prefix string, labels ...string) messages.JSON {
	blocks := []string{`{"type":"text","text":"Counting."}`}
	for i, l := range labels {
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":"toolu_%s_%d","name":"t-count","input":{"label":%q}}`, prefix, i, l))
	}
	return messages.JSON("[" + strings.Join(blocks, ",") + "]")
}

// A batch sent twice names the same calls, and each runs once.
func TestSubmitBatchSentTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	req := messages.SubmitBatchRequest{Format: "anthropic", ToolCalls: anthropicCalls("twice", "x", "y"), Turn: "turn-twice"}
	first, err := c.SubmitBatch(b.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Results(b.ctx, messages.ResultsRequest{Format: "anthropic", Calls: first.Calls, WaitMS: 20_000})
	if err != nil || !res.Complete {
		t.Fatalf("results %+v %v", res, err)
	}
	again, err := c.SubmitBatch(b.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, bc := range again.Calls {
		if bc.CallID != first.Calls[i].CallID || !bc.Duplicate || bc.State != messages.StateCompleted {
			t.Errorf("call %d sent again: %+v, first %+v", i, bc, first.Calls[i])
		}
		if of, _ := b.runsOf(bc.CallID); of != 1 {
			t.Errorf("call %d ran %d times", i, of)
		}
	}
	if _, all := b.runsOf(""); all != 2 {
		t.Errorf("%d runs, want 2", all)
	}
}

// RunToolCalls returns the provider's next input once every call ended.
func TestRunToolCallsReturnsTheNextInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	res, err := c.RunToolCalls(b.ctx, "openai-chat", `[{"id":"call_a","type":"function","function":{"name":"t-count","arguments":"{\"label\":\"a\"}"}},
		{"id":"call_b","type":"function","function":{"name":"t-nope","arguments":"{}"}}]`, client.WithTurn("turn-run"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"role":"tool","tool_call_id":"call_a","content":"a"}`,
		`{"role":"tool","tool_call_id":"call_b","content":"The call was refused (tool_not_found): no tool t-nope in the catalog"}`,
	}
	got := make([]string, len(res.Messages))
	for i, m := range res.Messages {
		got[i] = string(m)
	}
	if !res.Complete || !slices.Equal(got, want) {
		t.Fatalf("complete %v, messages\n%s\nwant\n%s", res.Complete, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// BenchmarkEightCalls compares one model iteration of eight no-op calls
// made with RunToolCalls (one calls.submit_batch with wait_ms) with
// the same eight calls made at once with Call: plain, in a turn (a new
// one each time, as the batch's), and, as a batch's calls are, in a turn
// with idempotency keys. The batch and the calls in a turn are also made
// in a turn whose tools were listed first (untimed), as an agent's loop
// lists them before the model answers. It reports the time until all
// eight results are in, with its median and 99th percentile.
func BenchmarkEightCalls(b *testing.B) {
	srv := testenv.Server(b)
	testenv.Coordinator(b, srv.URL())
	noop := worker.Func("noop", "Does nothing.", func(ctx context.Context, in struct{}) (string, error) { return "", nil })
	testenv.Worker(b, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{noop}, Slots: 16})
	c, err := client.New(testenv.Connect(b, srv.URL()), client.Options{Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	ctx := context.Background()
	var turns atomic.Int64
	// serverMsgs counts the messages the server received from its clients
	// and sent to them (JetStream's deliveries and republished copies
	// included).
	serverMsgs := func(b *testing.B) (in, out int64) {
		v, err := srv.Varz(nil)
		if err != nil {
			b.Fatal(err)
		}
		return v.InMsgs, v.OutMsgs
	}
	cpu := processCPU
	var in0, out0 int64
	var cpu0 time.Duration
	start := func(b *testing.B) { in0, out0 = serverMsgs(b); cpu0 = cpu(b) }
	report := func(b *testing.B, took []time.Duration) {
		in, out := serverMsgs(b)
		b.ReportMetric(float64((cpu(b)-cpu0).Microseconds())/float64(len(took)), "cpu-µs/op")
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(took[min(len(took)*99/100, len(took)-1)].Microseconds()), "p99-µs")
		b.ReportMetric(float64(in-in0)/float64(8*len(took)), "in-msgs/call")
		b.ReportMetric(float64(out-out0)/float64(8*len(took)), "out-msgs/call")
	}
	// listed lists the turn's tools, untimed, as an agent's loop does
	// before the model answers with the calls.
	listed := func(b *testing.B, turn string) {
		if _, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: turn}); err != nil {
			b.Fatal(err)
		}
	}
	batch := func(list bool) func(b *testing.B) {
		return func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			start(b)
			for range b.N {
				blocks := make([]string, 8)
				for k := range blocks {
					blocks[k] = fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d","name":"t-noop","input":{}}`, k)
				}
				turn := fmt.Sprintf("bench-batch-%d", turns.Add(1))
				if list {
					listed(b, turn)
				}
				start := time.Now()
				res, err := c.RunToolCalls(ctx, "anthropic", "["+strings.Join(blocks, ",")+"]", client.WithTurn(turn))
				if err != nil || !res.Complete {
					b.Fatalf("%+v %v", res, err)
				}
				took = append(took, time.Since(start))
			}
			report(b, took)
		}
	}
	// In a turn no request named before: the batch claims it.
	b.Run("batch", batch(false))
	// In a turn its tools were listed for, as an agent's loop makes it.
	b.Run("batch-listed", batch(true))
	single := func(list bool, opts func(turn string, k int) []client.CallOption) func(b *testing.B) {
		return func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			start(b)
			for range b.N {
				turn := fmt.Sprintf("bench-single-%d", turns.Add(1))
				if list {
					listed(b, turn)
				}
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, 8)
				for k := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := c.Call(ctx, "t-noop", nil, opts(turn, k)...); err != nil {
							errs <- err
						}
					}()
				}
				wg.Wait()
				close(errs)
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			report(b, took)
		}
	}
	// The durable writes of eight calls alone, with nothing else of a call:
	// no request, check, claim, delivery, worker or rendering. Eight queued
	// events (or one, for a batch recorded in one work item) published at
	// once with the conditions the coordinator's carry, then eight results
	// with the worker's, until their eight republished copies are in. What
	// a batch that keeps one record and one result per call must pay at
	// least, measured beside the calls.
	b.Run("writes-8+8", writesOnly(srv.URL(), 8))
	b.Run("writes-1+8", writesOnly(srv.URL(), 1))
	b.Run("reads-8", readsOnly(srv.URL()))
	b.Run("single", single(false, func(string, int) []client.CallOption { return nil }))
	inTurn := func(turn string, _ int) []client.CallOption { return []client.CallOption{client.WithTurn(turn)} }
	// As an agent's calls are: in a turn, which the first of them claims.
	b.Run("single-turn", single(false, inTurn))
	// In a turn its tools were listed for, as an agent's loop makes them.
	b.Run("single-turn-listed", single(true, inTurn))
	// As a batch's calls are: in a turn, each with its idempotency key.
	b.Run("single-keyed", single(false, func(turn string, k int) []client.CallOption {
		return []client.CallOption{client.WithTurn(turn), client.WithIdempotencyKey(fmt.Sprintf("%s/%d", turn, k))}
	}))
}

// processCPU is the CPU time of this process, which runs the server, the
// coordinator, the worker and the client: on a machine whose cores are
// busy, what the calls cost shows better than how long they take.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readsOnly makes the reads eight calls' workers make before they run
// their tools, at once: a direct get each of a call's result subject,
// which holds no result. Part of what a single call pays that a batch
// delivered to one worker as one work item could share.
func readsOnly(url string) func(b *testing.B) {
	return func(b *testing.B) {
		nc := testenv.Connect(b, url)
		names := messages.MustNames("toolbus")
		took := make([]time.Duration, 0, b.N)
		cpu0 := processCPU(b)
		for range b.N {
			bucket := messages.TurnBucket(nuid.Next())
			start := time.Now()
			var wg sync.WaitGroup
			for range 8 {
				subject, _ := names.Filters().Event(bucket, nuid.Next()+nuid.Next(), messages.EventResult, "writes")
				wg.Add(1)
				go func() {
					defer wg.Done()
					msg, err := nc.Request("$JS.API.DIRECT.GET."+names.EventsStream()+"."+subject, nil, 5*time.Second)
					if err != nil || msg.Header.Get("Status") != "404" {
						b.Errorf("read of a result that is not there: %v %v", msg, err)
					}
				}()
			}
			wg.Wait()
			took = append(took, time.Since(start))
		}
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(len(took)), "cpu-µs/op")
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	}
}

// writesOnly publishes records queued events and then eight results of a
// namespace no worker serves, straight to the events stream, and times
// them until the eight republished results are in.
func writesOnly(url string, records int) func(b *testing.B) {
	return func(b *testing.B) {
		nc := testenv.Connect(b, url)
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		names := messages.MustNames("toolbus")
		queued, result := make([]byte, 320), make([]byte, 200)
		publish := func(subject string, header map[string]string, data []byte) jetstream.PubAckFuture {
			m := nats.NewMsg(subject)
			m.Data = data
			for k, v := range header {
				m.Header.Set(k, v)
			}
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
		took := make([]time.Duration, 0, b.N)
		cpu0 := processCPU(b)
		for range b.N {
			route := nuid.Next()
			copies := make(chan *nats.Msg, 8)
			sub, err := nc.ChanSubscribe(names.Prefix()+".results."+route+".>", copies)
			if err != nil {
				b.Fatal(err)
			}
			turn := nuid.Next()
			bucket := messages.TurnBucket(turn)
			ids := make([]string, 8)
			for k := range ids {
				ids[k] = route + nuid.Next()
			}
			start := time.Now()
			acks := make([]jetstream.PubAckFuture, 0, records)
			for _, id := range ids[:records] {
				subject, _ := names.Events().Queued(id, turn, "writes")
				filter, _ := names.Filters().CallQueued(bucket, id)
				acks = append(acks, publish(subject, map[string]string{
					"Nats-Msg-Id": id + ".queued", "Nats-Expected-Last-Subject-Sequence": "0",
					"Nats-Expected-Last-Subject-Sequence-Subject": filter}, queued))
			}
			for _, f := range acks {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
			for _, id := range ids {
				subject, _ := names.Events().Subject(bucket, id, messages.EventResult, "writes")
				publish(subject, map[string]string{"Nats-Expected-Last-Subject-Sequence": "0"}, result)
			}
			for range ids {
				<-copies
			}
			took = append(took, time.Since(start))
			_ = sub.Unsubscribe()
		}
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(len(took)), "cpu-µs/op")
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(took[min(len(took)*99/100, len(took)-1)].Microseconds()), "p99-µs")
	}
}
