// Package worker is the runtime that executes Toolbus calls. Embed it to
// serve your own Go tools:
//
//	w, _ := worker.New(worker.Config{Conn: nc})
//	w.Serve(worker.Namespace{Name: "demo", Tools: []worker.Tool{
//		worker.Func("echo", "Returns its input.", func(ctx context.Context, in EchoArgs) (string, error) {
//			return in.Text, nil
//		}),
//	}})
//	w.Start(ctx)
//	defer w.Stop(context.Background())
//
// For every namespace the worker asks the namespace's durable consumer for
// at most as many calls as it has free slots (freed slots are asked for
// together, in one pull request), so a call never waits in a busy worker's
// buffer while another worker is idle. A pull request asks the server for
// idle heartbeats; requests not heard from for two heartbeat intervals are
// taken as lost and asked again, and a refused request (the consumer is
// missing) is asked again after a backoff. While a call runs, the worker tells
// JetStream it is still in progress every third of AckWait; if the worker
// dies, the call is delivered again to another worker after AckWait. A
// call's slot is freed once its result is stored and its message
// acknowledged; the goroutine that ran the tool does not wait for that.
//
// A tool's own failure — an error returned by its function, or a Result with
// IsError — is the call's answer, not a fault: it is not retried. Wrap an
// error with [Retry] when a later attempt could succeed.
//
// Each call runs under a context that ends at the call's deadline or when
// the call is cancelled; [context.Cause] tells which. The worker writes the
// timed_out or cancelled result at that moment, even if the tool ignores its
// context. Such a tool keeps running until it returns and keeps its slot
// until then, so that a worker never runs more calls than it has slots; its
// late return value is discarded. Stop, when its context ends first, gives
// those slots up and leaves the tools' goroutines behind.
package worker
