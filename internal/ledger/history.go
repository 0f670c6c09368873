package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// EventsAfter reads at most max of the call's events stored after the
// sequence after (0: from the first), oldest first, in one batched read
// that any replica may answer, and stops after the event that brings the
// stored size of those read to maxBytes or more (0: no bound), so that
// they fit in one reply. It holds no consumer on the server, so the
// coordinator can serve it for any number of followers.
func (l *Ledger) EventsAfter(ctx context.Context, bucket, ns, callID string, after uint64, max, maxBytes int) ([]*Event, error) {
	// Only the call's own namespace's and bucket's events: another
	// namespace's worker may have written under the call's ID (see
	// Snapshot.Namespace). One filter cannot name them (the queued event's
	// subject has a token more), so the others are skipped here.
	filter, err := l.names.CallEventsFilter(callID)
	if err != nil {
		return nil, err
	}
	var (
		events    []*Event
		size      int
		decodeErr error
	)
	err = l.events.GetBatch(ctx, transport.BatchRequest{Seq: after + 1, NextBySubject: filter, Batch: max}, func(seq uint64, msg *nats.Msg) bool {
		if l.names.EventNamespace(msg.Subject) != ns || l.names.EventBucket(msg.Subject) != bucket {
			return true
		}
		ev := &Event{Seq: seq, Namespace: ns, Bucket: bucket}
		if _, err := messages.DecodeStored(messages.Header(msg.Header), msg.Data, &ev.CallEvent); err != nil {
			decodeErr = fmt.Errorf("event %d of call %s: %w", seq, callID, err)
			return false
		}
		events = append(events, ev)
		size += len(msg.Data)
		return len(events) < max && (maxBytes <= 0 || size < maxBytes)
	})
	if err != nil {
		return nil, fmt.Errorf("read events of call %s: %w", callID, err)
	}
	return events, decodeErr
}

// NewRoutesOn is NewRoutes under a route the caller chose: with
// identities, the route its NATS user may receive (see messages.RouteSubject).
func NewRoutesOn(nc *nats.Conn, names messages.Names, route string) (*Routes, error) {
	if err := messages.ValidateRoute(route); err != nil {
		return nil, err
	}
	r := NewRoutes(nc, names)
	r.route = route
	return r, nil
}

// TurnCalls returns the IDs of the calls queued in a turn, in no order
// its callers rely on (turns.get sorts them), at most max of them: those whose queued events name
// the turn (TurnQueueFilter), stored at the sequence from or later. A
// turn's record keeps the first sequence its calls may have. A call held for an
// approval, queued again once approved, is listed once.
//
// Two reads serve: batched direct gets from from on, whose cost grows with
// the events stored since (the server scans them), and, when more than
// turnScanLimit events were stored since, one batched read of the last
// message of each subject matching the turn's filter, whose cost grows
// with the subjects in the stream but not with the turn's age; it holds
// at most 1,024 messages, and a turn with more is scanned.
func (l *Ledger) TurnCalls(ctx context.Context, turn string, from uint64, max int) ([]string, error) {
	filter, err := l.names.TurnQueueFilter(turn)
	if err != nil {
		return nil, err
	}
	if last, err := l.leaderLastSeq(ctx); err == nil && last >= from && last-from >= turnScanLimit {
		if ids, ok := l.turnCallsByLast(ctx, filter, from, max); ok {
			return ids, nil
		}
	}
	return l.turnCallsScan(ctx, turn, filter, from, max)
}

// turnScanLimit is how many events since a turn began TurnCalls scans
// before it reads the turn's subjects' last messages instead.
var turnScanLimit uint64 = 100_000

// turnCallsByLast reads the last queued event of each of the turn's calls
// in one request; ok is false when the read failed (among others, when
// the turn has more than 1,024 queued events).
func (l *Ledger) turnCallsByLast(ctx context.Context, filter string, from uint64, max int) ([]string, bool) {
	type queued struct {
		id  string
		seq uint64
	}
	var found []queued
	seen := make(map[string]bool)
	err := l.events.GetBatch(ctx, transport.BatchRequest{MultiLast: []string{filter}}, func(seq uint64, msg *nats.Msg) bool {
		if id, _, _, ok := l.names.ParseEventSubject(msg.Subject); ok && seq >= from && !seen[id] {
			seen[id] = true
			found = append(found, queued{id, seq})
		}
		return true
	})
	if err != nil {
		return nil, false
	}
	slices.SortFunc(found, func(a, b queued) int { return cmp.Compare(a.seq, b.seq) })
	ids := make([]string, 0, min(len(found), max))
	for _, q := range found[:min(len(found), max)] {
		ids = append(ids, q.id)
	}
	return ids, true
}

// turnCallsScan reads the turn's queued events from from on.
func (l *Ledger) turnCallsScan(ctx context.Context, turn, filter string, from uint64, max int) ([]string, error) {
	var ids []string
	seen := make(map[string]bool)
	next := from
	for len(seen) < max {
		read, last := 0, uint64(0)
		err := l.events.GetBatch(ctx, transport.BatchRequest{Seq: next, NextBySubject: filter, Batch: turnCallsBatch}, func(seq uint64, msg *nats.Msg) bool {
			read, last = read+1, seq
			if id, _, _, ok := l.names.ParseEventSubject(msg.Subject); ok && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
			return len(seen) < max
		})
		if err != nil {
			return nil, fmt.Errorf("read the calls of turn %s: %w", turn, err)
		}
		if read < turnCallsBatch {
			break
		}
		next = last + 1
	}
	return ids, nil
}

// ackedSeqFresh is how long an acknowledged sequence stands for the events
// stream's last in LastSeq: the events written since, by this coordinator
// or any other, are what a turn's listing may scan in vain.
const ackedSeqFresh = 250 * time.Millisecond

// turnCallsBatch is how many queued events one read of a turn's calls asks for.
const turnCallsBatch = 1000

// LastSeq returns a sequence of the events stream no later than its last:
// the one at which the stream last acknowledged one of this ledger's writes,
// when that answer came within ackedSeqFresh, or else the last sequence as
// the stream's leader knows it, read from the stream's info. Either is a
// lower bound of every sequence written after LastSeq returns, which is
// what a new turn records (the first sequence its calls may have); the
// acknowledged one spares a busy coordinator a request whose answer (the
// stream's whole configuration and state, in JSON) costs the server more
// than a write.
func (l *Ledger) LastSeq(ctx context.Context) (uint64, error) {
	if at := l.ackedAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < ackedSeqFresh {
		return l.ackedSeq.Load(), nil
	}
	return l.leaderLastSeq(ctx)
}

// leaderLastSeq returns the events stream's last sequence, as its leader
// knows it.
func (l *Ledger) leaderLastSeq(ctx context.Context) (uint64, error) {
	s, err := l.js.Stream(ctx, l.names.EventsStream())
	if err != nil {
		return 0, fmt.Errorf("read the events stream's state: %w", err)
	}
	return s.CachedInfo().State.LastSeq, nil
}
