package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Turns reads the events stream as the index of turns: which calls a turn
// queued (their queued events' subjects name it), and the sequence from
// which a new turn's calls are stored.
type Turns struct {
	js     jetstream.JetStream
	names  messages.Names
	events *transport.Stream
	// acks is the ledger's latest acknowledged write.
	acks *lastAck
}

// Turns returns the ledger's index of turns.
func (l *Ledger) Turns() *Turns { return l.turns }

// TurnCalls returns the IDs of the calls queued in a turn, in no order
// its callers rely on (turns.get sorts them), at most max of them: those
// whose queued events name the turn (messages.FilterNames.TurnQueue),
// stored at the sequence from or later. A turn's record keeps the first
// sequence its calls may have. A call held for an approval, queued again
// once approved, is listed once.
//
// Two reads serve: batched direct gets from from on, whose cost grows with
// the events stored since (the server scans them), and, when more than
// turnScanLimit events were stored since, one batched read of the last
// message of each subject matching the turn's filter, whose cost grows
// with the subjects in the stream but not with the turn's age; it holds
// at most 1,024 messages, and a turn with more is scanned.
func (t *Turns) TurnCalls(ctx context.Context, turn string, from uint64, max int) ([]string, error) {
	filter, err := t.names.Filters().TurnQueue(turn)
	if err != nil {
		return nil, err
	}
	if last, err := t.leaderLastSeq(ctx); err == nil && last >= from && last-from >= turnScanLimit {
		if ids, ok := t.turnCallsByLast(ctx, filter, from, max); ok {
			return ids, nil
		}
	}
	return t.turnCallsScan(ctx, turn, filter, from, max)
}

// turnScanLimit is how many events since a turn began TurnCalls scans
// before it reads the turn's subjects' last messages instead.
var turnScanLimit uint64 = 100_000

// turnCallsByLast reads the last queued event of each of the turn's calls
// in one request; ok is false when the read failed (among others, when
// the turn has more than 1,024 queued events).
func (t *Turns) turnCallsByLast(ctx context.Context, filter string, from uint64, max int) ([]string, bool) {
	type queued struct {
		id  string
		seq uint64
	}
	var found []queued
	seen := make(map[string]bool)
	err := t.events.GetBatch(ctx, transport.BatchRequest{MultiLast: []string{filter}}, func(seq uint64, msg *nats.Msg) bool {
		if id, _, _, ok := t.names.Events().Parse(msg.Subject); ok && seq >= from && !seen[id] {
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
func (t *Turns) turnCallsScan(ctx context.Context, turn, filter string, from uint64, max int) ([]string, error) {
	var ids []string
	seen := make(map[string]bool)
	next := from
	for len(seen) < max {
		read, last := 0, uint64(0)
		err := t.events.GetBatch(ctx, transport.BatchRequest{Seq: next, NextBySubject: filter, Batch: turnCallsBatch}, func(seq uint64, msg *nats.Msg) bool {
			read, last = read+1, seq
			if id, _, _, ok := t.names.Events().Parse(msg.Subject); ok && !seen[id] {
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
// or the last one read from the stream's info, when that came within
// ackedSeqFresh, or else the last sequence as the stream's leader knows
// it, read from the stream's info. Any of these is a lower bound of every
// sequence written after LastSeq returns, which is what a new turn records
// (the first sequence its calls may have); the remembered ones spare a
// coordinator a request whose answer (the stream's whole configuration and
// state, in JSON) costs the server more than a write: at most one such
// read per ackedSeqFresh is made while new turns search without calls.
func (t *Turns) LastSeq(ctx context.Context) (uint64, error) {
	if seq, ok := t.acks.recent(ackedSeqFresh); ok {
		return seq, nil
	}
	seq, err := t.leaderLastSeq(ctx)
	if err == nil {
		t.acks.noteRead(seq)
	}
	return seq, err
}

// leaderLastSeq returns the events stream's last sequence, as its leader
// knows it.
func (t *Turns) leaderLastSeq(ctx context.Context) (uint64, error) {
	s, err := t.js.Stream(ctx, t.names.EventsStream())
	if err != nil {
		return 0, fmt.Errorf("read the events stream's state: %w", err)
	}
	return s.CachedInfo().State.LastSeq, nil
}
