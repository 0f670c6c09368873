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
// missing or has no leader, the request could not be sent) is asked again
// after a backoff that doubles with each refusal in a row; one warning is
// logged per run of refusals. While a call runs, the worker tells
// JetStream it is still in progress every third of AckWait; if the worker
// dies, the call is delivered again to another worker after AckWait. A
// call's slot is freed once its result is stored and its message
// acknowledged; the goroutine that ran the tool does not wait for that.
//
// # Deliveries and attempts
//
// JetStream counts every delivery of a message against the consumer's
// MaxDeliver (MaxAttempts plus one): a message handed back (Nak, with or
// without a delay) or left to expire after AckWait is delivered again with
// its count one higher, and only InProgress extends a delivery without
// counting. No acknowledgement gives a delivery back; the server itself
// uncounts only a delivery that found no subscriber. So the worker never
// hands back a call it has not run when it can keep it instead:
//
//   - A call delivered when no slot is free (a pull request taken as lost,
//     because nothing was heard from it for two heartbeat intervals or the
//     connection was re-established, answered after all, as after a
//     consumer leader change) is held: its lease is renewed with the
//     others', and it takes the next slot that frees, before anything new
//     is asked for, as the same attempt. Requests taken as lost are asked
//     again on a new inbox, and what their late answers deliver is not
//     counted against the current requests, so the poller does not ask for
//     more than it has room for. A call held for 4 AckWaits (2 minutes by
//     default) is handed back, so that an idle worker can take it, and Stop
//     hands back the held calls: these two cost a delivery.
//   - On the consumer's extra delivery past MaxAttempts, the call fails
//     with max_attempts only if one of its deliveries started its tool (the
//     ledger has its started event, recorded once a tool has run for
//     StartDelay or before a call whose tool ran is handed back, or its
//     result; an at-most-once call fails with outcome_unknown instead);
//     otherwise it runs. Deliveries that no
//     worker ran (a worker that stopped or died while holding it, one that
//     does not serve the tool) thus do not fail a call that never ran.
//
// # Storing a result
//
// A result is stored only if the call has none (first write wins), so a
// write is safe to repeat: a retry after a write whose answer was lost
// finds the result standing. A worker that has a result keeps trying to
// store it, renewing the call's lease before each try, with a backoff from
// 100ms doubling to 5s (or a third of AckWait, when shorter), each try
// bounded by 10s (or a third of AckWait); it hands the call back only after
// 10 minutes, or when Stop's context ends. Handing it back sooner would run
// the tool again. Likewise, before running a call delivered again, the
// worker reads whether an earlier attempt stored a result or was
// cancelled; a failed read is retried the same way, the call leased, for
// up to a minute, and the call is handed back, its tool not run, if the
// record stays unreadable.
//
// A tool's own failure — an error returned by its function, or a Result with
// IsError — is the call's answer, not a fault: it is not retried. Wrap an
// error with [Retry] when a later attempt could succeed.
//
// # Tools that must not run twice
//
// A tool's Definition.Delivery is its guarantee. At least once (the
// default) runs a call again when its worker stopped before reporting.
// At most once ([AtMostOnce], [WithDelivery]; the default of a tool tagged
// destructive) never does: before the tool runs, the worker stores the
// call's started event and waits for the stream to acknowledge it, written
// only if no attempt started the call before; a start that cannot be
// stored hands the call back with its tool not run. A later delivery (the
// worker died, lost its lease) that finds the start and no result ends the
// call failed with code outcome_unknown, as does a worker that Stop
// interrupts while the tool runs, and a tool that asks for another attempt
// with [Retry]: the effects of a run that did not report are unknown, and
// the call's caller decides what to do about them.
//
// Each call runs under a context that ends at the call's deadline
// ([ErrDeadline]), when the call is cancelled ([ErrCancelled]), when the
// worker stops ([ErrStopping]), or when the call got a result from
// elsewhere while the tool ran ([ErrSuperseded]); [context.Cause] tells
// which. The worker writes the
// timed_out or cancelled result at that moment, even if the tool ignores its
// context. Such a tool keeps running until it returns and keeps its slot
// until then, so that a worker never runs more calls than it has slots; its
// late return value is discarded. Stop, when its context ends first, gives
// those slots up and leaves the tools' goroutines behind.
package worker
