package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/lease"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
)

// sweeper ends what would otherwise wait forever: queued calls whose
// deadline passed long ago (of a namespace no worker serves, or whose
// workers cannot keep up), calls whose
// every delivery was lost, and approvals whose time ran out or whose
// decision a stopped coordinator left half done.
type sweeper struct {
	stream    *callStream
	ledger    resultCommitter
	approvals *approvals
	// interval is how often it sweeps; grace how long past its deadline a
	// queued call may stay.
	interval, grace time.Duration
	// unavailableWait bounds the retries of a read or write (Config.UnavailableWait).
	unavailableWait time.Duration
	log             *slog.Logger

	// catalog, when set, gives the namespaces whose workers and queue the
	// sweep measures (with metrics on).
	catalog *catalog.View
	// depths, when set, keeps the queue depths each sweep reads.
	depths *depthHistory

	sub    *nats.Subscription
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// exhausted holds the advisories of calls whose failure could not be
	// recorded yet, by stream sequence: an advisory is not sent again, so
	// each sweep tries them until they are recorded.
	mu        sync.Mutex
	exhausted map[uint64]maxDeliveriesAdvisory
	// swept is, by namespace, the sequence up to which the calls a sweep
	// read have all ended (see sweepNamespace).
	swept map[string]uint64
	// settled is, by namespace, the sequence up to which the calls behind
	// the consumer's floor have been found with a result or ended (see
	// sweepSettled); settledLookback, when set, replaces its first
	// sweep's look back (settledLookback).
	settled         map[string]uint64
	settledLookback time.Duration
	// index, when set, follows the calls queued without a result, so that
	// the sweep of settled calls reads only about those (settledIndex).
	index *settledIndex
	// duty, when set, is the lease under which this sweeper sweeps settled
	// calls: one coordinator's at a time (duties). settling is whether it
	// held the lease at its last sweep.
	duty     *lease.Lease
	settling bool
}

// resultCommitter writes a call's result unless it has one.
type resultCommitter interface {
	Commit(ctx context.Context, bucket, ns string, res *messages.CallResult, notify string) (bool, error)
}

// start subscribes to the max-deliveries advisories and starts sweeping.
func (s *sweeper) start() error {
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.watchMaxDeliveries(ctx); err != nil {
		cancel()
		return err
	}
	s.cancel = cancel
	if s.index != nil && s.duty == nil {
		// Follow from now on, so that the first sweep reads only what came
		// before; a failure here is tried again at each sweep.
		cctx, ccancel := context.WithTimeout(ctx, requestTimeout)
		_ = s.index.catchUp(cctx)
		ccancel()
	}
	s.wg.Add(1)
	go s.loop(ctx)
	return nil
}

// stop unsubscribes, stops sweeping and waits for the work under way.
func (s *sweeper) stop() error {
	err := s.sub.Unsubscribe()
	s.cancel()
	s.wg.Wait()
	if s.index != nil {
		s.index.stop(context.Background())
	}
	return err
}

// maxDeliveriesAdvisory is what JetStream publishes when a call was
// delivered as often as its consumer allows without being acknowledged.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// watchMaxDeliveries fails calls whose every delivery was lost. Workers
// normally record that failure on the extra delivery the consumer allows;
// this covers the case where that delivery was lost too.
func (s *sweeper) watchMaxDeliveries(ctx context.Context) error {
	names := s.stream.names
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + names.EventsStream() + ".*"
	sub, err := s.stream.nc.QueueSubscribe(subject, names.Prefix()+"_coordinators", func(msg *nats.Msg) {
		var adv maxDeliveriesAdvisory
		if err := json.Unmarshal(msg.Data, &adv); err != nil {
			s.log.Warn("unreadable max-deliveries advisory", "error", err)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.endExhausted(ctx, adv)
		}()
	})
	if err != nil {
		return fmt.Errorf("subscribe to max-deliveries advisories: %w", err)
	}
	s.sub = sub
	return nil
}

// endExhausted fails an exhausted call, or keeps its advisory for the
// next sweep if its failure cannot be recorded now.
func (s *sweeper) endExhausted(ctx context.Context, adv maxDeliveriesAdvisory) {
	actx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	err := s.failExhausted(actx, adv)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil || ctx.Err() != nil {
		delete(s.exhausted, adv.StreamSeq)
		return
	}
	if s.exhausted == nil {
		s.exhausted = make(map[uint64]maxDeliveriesAdvisory)
	}
	if _, again := s.exhausted[adv.StreamSeq]; !again {
		s.log.Warn("could not fail exhausted call; trying again at the next sweep", "seq", adv.StreamSeq, "error", err)
	}
	s.exhausted[adv.StreamSeq] = adv
}

// retryExhausted tries again to fail the exhausted calls whose failure
// could not be recorded before.
func (s *sweeper) retryExhausted(ctx context.Context) {
	s.mu.Lock()
	pending := make([]maxDeliveriesAdvisory, 0, len(s.exhausted))
	for _, adv := range s.exhausted {
		pending = append(pending, adv)
	}
	s.mu.Unlock()
	for _, adv := range pending {
		if ctx.Err() != nil {
			return
		}
		s.endExhausted(ctx, adv)
	}
}

// pendingExhausted is how many exhausted calls wait to be failed.
func (s *sweeper) pendingExhausted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.exhausted)
}

// failExhausted records the failure of a call whose deliveries ran out.
// Its queued event, the message the advisory names, stays in the events
// stream: it is the call's record, and the consumer delivers it no more.
// It returns an error if it should be tried again: the call could not be
// read or its failure not recorded.
func (s *sweeper) failExhausted(ctx context.Context, adv maxDeliveriesAdvisory) error {
	var raw *jetstream.RawStreamMsg
	err := retryTransient(ctx, s.wait(), func(ctx context.Context) (err error) {
		raw, err = s.stream.stream.GetMsg(ctx, adv.StreamSeq)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // gone with its age
	}
	if err != nil {
		return fmt.Errorf("read exhausted call %d: %w", adv.StreamSeq, err)
	}
	callID, kind, ns, ok := s.stream.names.Events().Parse(raw.Subject)
	if !ok || kind != messages.EventQueued || messages.ValidateID("call ID", callID) != nil || messages.ValidateNamespace(ns) != nil {
		return nil // not a queued event: no call of a namespace's consumer
	}
	call := messages.CallRequest{CallID: callID, Namespace: ns}
	var ev messages.CallEvent
	if _, err := messages.Decode(messages.Header(raw.Header), raw.Data, &ev); err == nil && ev.Request != nil && ev.Request.CallID == callID {
		call = *ev.Request
		// The subject's namespace is the one the server confines the
		// result to.
		call.Namespace = ns
	}
	// The last delivery, the one past MaxAttempts, is the consumer's extra
	// one for recording the failure; the attempts are those before it.
	attempts := max(int(adv.Deliveries)-1, 1)
	res := endResult(&call, messages.StateFailed, messages.ResultAttempts, messages.ExhaustedMessage(attempts, s.lastLog(ctx, call.Namespace, call.CallID)))
	res.Attempt = attempts
	// A retried commit whose first attempt was stored finds a result and
	// reports that another won: either way the call has one.
	if err := retryTransient(ctx, s.wait(), func(ctx context.Context) error {
		_, err := s.ledger.Commit(ctx, messages.TurnBucket(call.Turn), call.Namespace, &res, call.Notify)
		return err
	}); err != nil {
		return fmt.Errorf("fail exhausted call %s: %w", call.CallID, err)
	}
	return nil
}

// snapshotReader reads a call's latest events; the coordinator's ledger does.
type snapshotReader interface {
	SnapshotIn(ctx context.Context, ns, callID string) (*ledger.Snapshot, error)
}

// lastLog returns the call's latest log event, which says why its last
// attempt asked for another when a worker recorded that; nil when there is
// none or it cannot be read, which leaves the failure without a cause.
func (s *sweeper) lastLog(ctx context.Context, ns, callID string) *messages.CallEvent {
	r, ok := s.ledger.(snapshotReader)
	if !ok {
		return nil
	}
	snap, err := r.SnapshotIn(ctx, ns, callID)
	if err != nil || snap.Log == nil {
		return nil
	}
	return &snap.Log.CallEvent
}

// wait bounds the retries of one read or write while JetStream does not answer.
func (s *sweeper) wait() time.Duration {
	if s.unavailableWait > 0 {
		return s.unavailableWait
	}
	return DefaultUnavailableWait
}

func endResult(call *messages.CallRequest, status messages.CallState, code, message string) messages.CallResult {
	return messages.CallResult{
		CallID:     call.CallID,
		Tool:       call.Tool,
		Status:     status,
		IsError:    true,
		Content:    []messages.ContentBlock{messages.TextBlock(message)},
		Error:      &messages.ResultError{Code: code, Message: message},
		QueuedAt:   call.QueuedAt,
		FinishedAt: time.Now().UTC(),
	}
}

// sweepBatch bounds how many queued calls one sweep reads.
const sweepBatch = 4096

// loop sweeps every interval until ctx ends.
func (s *sweeper) loop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.retryExhausted(ctx)
			if err := s.sweepCalls(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sweep of expired calls failed", "error", err)
			}
			if err := s.approvals.sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sweep of approvals failed", "error", err)
			}
			s.measureNamespaces(ctx)
		}
	}
}

// sweepCalls ends queued calls whose deadline passed more than grace
// ago, of every namespace that has a consumer: the calls past its
// consumer's acknowledgement floor that have no result.
func (s *sweeper) sweepCalls(ctx context.Context) error {
	consumers, err := s.stream.namespaceConsumers(ctx)
	if err != nil {
		return err
	}
	settling := s.holdsSettledDuty(ctx)
	if s.index != nil && settling {
		s.index.keepOnly(consumers)
		if err := s.index.catchUp(ctx); err != nil && ctx.Err() == nil {
			// The sweep reads what the index does not cover, as before.
			s.log.Debug("calls without a result not followed", "error", err)
		}
	}
	cutoff := time.Now().Add(-s.grace)
	for ns, consumer := range consumers {
		if err := s.sweepNamespace(ctx, ns, consumer, cutoff, settling); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	return nil
}

// holdsSettledDuty says whether this sweep sweeps settled calls: always
// without a duty, else while this coordinator holds its lease. A sweeper
// that loses it stops following; one that takes it starts again as a
// coordinator that starts does: following from then on, and reading back
// what came before.
func (s *sweeper) holdsSettledDuty(ctx context.Context) bool {
	if s.duty == nil {
		return true
	}
	held := s.duty.Valid()
	if held != s.settling {
		if held {
			s.mu.Lock()
			s.settled = nil
			s.mu.Unlock()
		} else if s.index != nil {
			s.index.reset(ctx)
		}
		s.settling = held
	}
	return held
}

// sweepNamespace ends the expired calls among those a namespace's
// consumer has not seen acknowledged, reading from where the last sweep
// left off: past the calls it has seen ended, up to the first it has not.
// It reads sweepBatch queued events at most.
func (s *sweeper) sweepNamespace(ctx context.Context, ns, consumer string, cutoff time.Time, settling bool) error {
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	info, err := s.stream.consumerInfo(cctx, consumer)
	cancel()
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if s.depths != nil {
		s.depths.record(ns, messages.QueueDepth{Waiting: int64(info.NumPending), Delivered: int64(info.NumAckPending), Time: time.Now()})
	}
	if settling {
		if err := s.sweepSettled(ctx, ns, info.AckFloor.Stream); err != nil {
			return err
		}
	}
	if info.NumPending == 0 && info.NumAckPending == 0 {
		return nil
	}
	filter, err := s.stream.names.Filters().NamespaceQueue(ns)
	if err != nil {
		return err
	}
	// Past the consumer's floor, every call not acknowledged yet: those
	// not delivered, and those a worker holds or will be handed again.
	from := max(info.AckFloor.Stream+1, s.sweptUpTo(ns)+1)
	upTo, settled := uint64(0), true
	err = s.stream.scanQueue(ctx, transport.BatchRequest{Seq: from, NextBySubject: filter, Batch: sweepBatch}, func(seq uint64, msg *nats.Msg) bool {
		var ev messages.CallEvent
		_, err := messages.Decode(messages.Header(msg.Header), msg.Data, &ev)
		ended := false
		switch call := ev.Request; {
		case msg.Header.Get(messages.HeaderAwaiting) != "":
			// A call awaiting approval: the approvals' sweep ends it when
			// its approval expires; once approved, it is queued again.
			ended = true
		case err != nil || call == nil || call.CallID == "":
			ended = true // nothing to end: the worker it reaches fails it
		case call.Deadline.IsZero() || call.Deadline.After(cutoff):
		default:
			call.Namespace = ns
			why := "the call's deadline passed and no worker finished it"
			if s.catalog != nil && !s.catalog.Available(ns) {
				// The likeliest cause for a new user: nothing serves it.
				why += " (no live worker serves namespace " + ns + ")"
			}
			res := endResult(call, messages.StateTimedOut, messages.ResultTimedOut, why)
			if _, err := s.ledger.Commit(ctx, messages.TurnBucket(call.Turn), ns, &res, call.Notify); err != nil {
				s.log.Warn("could not end expired call", "call", call.CallID, "error", err)
			} else {
				// Ended now or before (cancelled): the worker it reaches
				// finds its result and does not run it.
				ended = true
			}
		}
		settled = settled && ended
		if settled {
			upTo = seq
		}
		return true
	})
	if upTo > 0 {
		s.mu.Lock()
		if s.swept == nil {
			s.swept = make(map[string]uint64)
		}
		s.swept[ns] = upTo
		s.mu.Unlock()
	}
	return err
}

// sweptUpTo is the sequence up to which every queued call of ns that a
// sweep read has ended.
func (s *sweeper) sweptUpTo(ns string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.swept[ns]
}

// callStream reads queued calls, the queued events in the events stream,
// without consuming them.
type callStream struct {
	nc     *nats.Conn
	names  messages.Names
	stream jetstream.Stream
	log    *slog.Logger
}

// namespaceConsumers lists the namespaces' consumers on the events
// stream, by namespace (other consumers there are watches).
func (c *callStream) namespaceConsumers(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	lister := c.stream.ConsumerNames(ctx)
	out := make(map[string]string)
	for name := range lister.Name() {
		ns, ok := strings.CutPrefix(name, "ns_")
		if ok && messages.ValidateNamespace(ns) == nil {
			if want, _ := c.names.Consumers().Durable(ns); want == name {
				out[ns] = name
			}
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list the namespaces' consumers: %w", err)
	}
	return out, nil
}

// consumerInfo reads a namespace consumer's state.
func (c *callStream) consumerInfo(ctx context.Context, name string) (*jetstream.ConsumerInfo, error) {
	cons, err := c.stream.Consumer(ctx, name)
	if err != nil {
		return nil, err
	}
	return cons.Info(ctx)
}

// scanQueue reads queued events without consuming them, until each
// returns false or the batch ends.
func (c *callStream) scanQueue(ctx context.Context, req transport.BatchRequest, each func(uint64, *nats.Msg) bool) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return transport.NewStream(c.nc, nil, c.names.EventsStream()).GetBatch(ctx, req, each)
}
