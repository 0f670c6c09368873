package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// The sweep of settled calls.
//
// A namespace's consumer moves its acknowledgement floor past a call once
// a worker acknowledged or terminated it, and also once its deliveries
// ran out: JetStream then delivers it no more and sends an advisory,
// which a coordinator turns into the call's failure (see
// watchMaxDeliveries). An advisory is a plain message: one that reaches
// no coordinator (none connected, or the one that took it stopped before
// recording the failure) leaves its call without a result for ever, and
// so would a worker that let a call go without one. So every sweep also
// reads the calls that the floor passed since the last, and ends those
// that have no result at the stream's leader.

// settledLookback is how far back, at its first sweep, a coordinator
// looks at calls its namespaces' consumers settled: the calls settled
// while no coordinator ran are found if it starts within this time.
const settledLookback = 15 * time.Minute

// settledBudget bounds the queued events one sweep reads behind a
// namespace's floor; a sweep that had more to read goes on from there
// at the next.
const settledBudget = 4 * sweepBatch

// withoutResult finds, among calls, those that have no result; the
// coordinator's ledger does.
type withoutResult interface {
	WithoutResult(ctx context.Context, calls []ledger.CallRef) ([]ledger.CallRef, error)
}

// settledUpTo is the sequence up to which every queued call of ns behind
// its consumer's floor has been checked, 0 before the first sweep.
func (s *sweeper) settledUpTo(ns string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settled[ns]
}

func (s *sweeper) settledTo(ns string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settled == nil {
		s.settled = make(map[string]uint64)
	}
	s.settled[ns] = seq
}

// sweepSettled ends the calls of ns that its consumer's floor passed
// without a result: it reads the queued events from where the last sweep
// stopped (at first, those stored in the last settledLookback) up to
// floor, settledBudget at most, and commits for each call that has no
// result, once the stream's leader confirms it has none, a failure
// (max_attempts: its queue delivers it no more). A call held for an
// approval is not work, and is left to the approvals' sweep.
func (s *sweeper) sweepSettled(ctx context.Context, ns string, floor uint64) error {
	finder, ok := s.ledger.(withoutResult)
	if !ok || floor == 0 {
		return nil
	}
	from := s.settledUpTo(ns) + 1
	if from > floor {
		return nil
	}
	if s.index != nil {
		if coveredFrom, through, failing, ok := s.index.covers(ns); ok {
			if from >= coveredFrom {
				if err := s.sweepOpen(ctx, ns, finder, from, min(floor, through)); err != nil || floor <= through || !failing {
					return err
				}
				// The index stopped following: read what came after it.
				if from = s.settledUpTo(ns) + 1; from > floor {
					return nil
				}
			} else {
				// Read what came before the index's start; it takes over
				// from there at a later sweep.
				floor = min(floor, coveredFrom-1)
			}
		}
	}
	filter, err := s.stream.names.Filters().NamespaceQueue(ns)
	if err != nil {
		return err
	}
	req := transport.BatchRequest{Seq: from, NextBySubject: filter, Batch: sweepBatch}
	if from == 1 {
		since := time.Now().Add(-s.lookback())
		req.Seq, req.StartTime = 0, &since
	}
	read := 0
	for read < settledBudget {
		var (
			calls []ledger.CallRef
			// seqs are the calls' queued events, read again (and
			// decoded) only for the rare call found without a result.
			seqs = make(map[string]uint64)
			last uint64
			n    int
		)
		events := s.stream.names.Events()
		err := s.stream.scanQueue(ctx, req, func(seq uint64, msg *nats.Msg) bool {
			if seq > floor {
				return false
			}
			last, n = seq, n+1
			if msg.Header.Get(messages.HeaderAwaiting) != "" {
				return true
			}
			callID, kind, _, ok := events.Parse(msg.Subject)
			if !ok || kind != messages.EventQueued || messages.ValidateID("call ID", callID) != nil {
				return true // nothing a result could be written for
			}
			calls = append(calls, ledger.CallRef{Bucket: events.Bucket(msg.Subject), Namespace: ns, CallID: callID})
			seqs[callID] = seq
			return true
		})
		if err != nil {
			return fmt.Errorf("read settled calls from %d: %w", req.Seq, err)
		}
		if n == 0 {
			s.settledTo(ns, floor)
			return nil
		}
		missing, err := finder.WithoutResult(ctx, calls)
		if err != nil {
			return err
		}
		for _, ref := range missing {
			call, err := s.queuedRequest(ctx, seqs[ref.CallID], ref.CallID)
			if err != nil {
				return err
			}
			if call == nil {
				continue // nothing a result could be written for
			}
			if err := s.endSettled(ctx, ref, call); err != nil {
				return err
			}
		}
		s.settledTo(ns, last)
		read += n
		if last >= floor {
			return nil
		}
		req = transport.BatchRequest{Seq: last + 1, NextBySubject: filter, Batch: sweepBatch}
	}
	return nil
}

// sweepOpen is sweepSettled over the calls the index covers: of the
// calls queued from from through upTo, it asks the stream about those
// the index saw without a result, and ends those that have none.
func (s *sweeper) sweepOpen(ctx context.Context, ns string, finder withoutResult, from, upTo uint64) error {
	if upTo < from {
		return nil
	}
	open := s.index.openUpTo(ns, from, upTo)
	if len(open) > 0 {
		refs := make([]ledger.CallRef, 0, len(open))
		seqs := make(map[string]uint64, len(open))
		for _, c := range open {
			if messages.ValidateID("call ID", c.callID) != nil {
				continue // nothing a result could be written for
			}
			refs = append(refs, ledger.CallRef{Bucket: c.bucket, Namespace: ns, CallID: c.callID})
			seqs[c.bucket+"."+c.callID] = c.seq
		}
		missing, err := finder.WithoutResult(ctx, refs)
		if err != nil {
			return err
		}
		for _, ref := range missing {
			call, err := s.queuedRequest(ctx, seqs[ref.Bucket+"."+ref.CallID], ref.CallID)
			if err != nil {
				return err
			}
			if call == nil {
				continue
			}
			if err := s.endSettled(ctx, ref, call); err != nil {
				return err
			}
		}
		s.index.closed(ns, open)
	}
	s.settledTo(ns, upTo)
	return nil
}

// queuedRequest reads the request a call's queued event at seq carries;
// nil when the event is gone or holds no request of that call.
func (s *sweeper) queuedRequest(ctx context.Context, seq uint64, callID string) (*messages.CallRequest, error) {
	var raw *jetstream.RawStreamMsg
	err := retryTransient(ctx, s.wait(), func(ctx context.Context) (err error) {
		raw, err = s.stream.stream.GetMsg(ctx, seq)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil // gone with its age
	}
	if err != nil {
		return nil, fmt.Errorf("read settled call %s: %w", callID, err)
	}
	var ev messages.CallEvent
	if _, err := messages.Decode(messages.Header(raw.Header), raw.Data, &ev); err != nil || ev.Request == nil || ev.Request.CallID != callID {
		return nil, nil
	}
	return ev.Request, nil
}

// endSettled fails a call that its queue settled without a result.
func (s *sweeper) endSettled(ctx context.Context, ref ledger.CallRef, call *messages.CallRequest) error {
	c := *call
	c.Namespace = ref.Namespace
	res := endResult(&c, messages.StateFailed, messages.ResultAttempts, settledMessage)
	s.log.Warn("a call's queue settled it without a result; ending it", "call", c.CallID, "namespace", c.Namespace)
	if err := retryTransient(ctx, s.wait(), func(ctx context.Context) error {
		_, err := s.ledger.Commit(ctx, ref.Bucket, ref.Namespace, &res, c.Notify)
		return err
	}); err != nil {
		return fmt.Errorf("end settled call %s: %w", c.CallID, err)
	}
	return nil
}

// settledMessage is the failure of a call found settled without a result.
const settledMessage = "the call's queue delivers it no more and no attempt stored a result (its deliveries ran out, or a worker let it go without one); ended by the sweep of settled calls"

// lookback is how far back the first sweep of settled calls reads.
func (s *sweeper) lookback() time.Duration {
	if s.settledLookback > 0 {
		return s.settledLookback
	}
	return settledLookback
}
