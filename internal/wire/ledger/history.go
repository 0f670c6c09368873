package ledger

import (
	"context"
	"fmt"
	"math"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// EventsAfter reads at most max of the call's events stored after the
// sequence after (0: from the first), oldest first, in one batched read
// that any replica may answer, and stops after the event that brings the
// stored size of those read to maxBytes or more (0: no bound), so that
// they fit in one reply. It holds no consumer on the server, so the
// coordinator can serve it for any number of followers. complete tells
// that the read reached the stream's end: the call had no other event
// after after when it was made.
func (l *Ledger) EventsAfter(ctx context.Context, bucket, ns, callID string, after uint64, max, maxBytes int) (events []*Event, complete bool, err error) {
	// Only the call's own namespace's and bucket's events: another
	// namespace's worker may have written under the call's ID (see
	// Snapshot.Namespace). One filter cannot name them (the queued event's
	// subject has a token more), so the others are skipped here.
	filter, err := l.names.Filters().CallEvents(callID)
	if err != nil {
		return nil, false, err
	}
	if after == math.MaxUint64 {
		// No sequence comes after it; after+1 would wrap to the first.
		return nil, true, nil
	}
	var (
		size, seen int
		cut        bool
		decodeErr  error
	)
	err = l.events.GetBatch(ctx, transport.BatchRequest{Seq: after + 1, NextBySubject: filter, Batch: max}, func(seq uint64, msg *nats.Msg) bool {
		seen++
		if l.names.Events().Namespace(msg.Subject) != ns || l.names.Events().Bucket(msg.Subject) != bucket {
			return true
		}
		ev := &Event{Seq: seq, Namespace: ns, Bucket: bucket}
		if _, err := messages.DecodeStored(messages.Header(msg.Header), msg.Data, &ev.CallEvent); err != nil {
			decodeErr = fmt.Errorf("event %d of call %s: %w", seq, callID, err)
			return false
		}
		events = append(events, ev)
		size += len(msg.Data)
		cut = maxBytes > 0 && size >= maxBytes
		return len(events) < max && !cut
	})
	if err != nil {
		return nil, false, fmt.Errorf("read events of call %s: %w", callID, err)
	}
	return events, decodeErr == nil && !cut && seen < max, decodeErr
}

// NewRoutesOn is NewRoutes under a route the caller chose: with
// identities, the route its NATS user may receive (see messages.RouteNames.Subject).
func NewRoutesOn(nc *nats.Conn, names messages.Names, route string) (*Routes, error) {
	if err := messages.ValidateRoute(route); err != nil {
		return nil, err
	}
	r := NewRoutes(nc, names)
	r.route = route
	return r, nil
}
