package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// reader reads stored events: the latest of each kind of calls, in
// batched reads that any replica answers, confirmed one by one at the
// stream's leader where a reader decides on an absence (a replica may lag
// behind the leader's acknowledged writes).
type reader struct {
	names messages.Names
	// events reads on the ledger's inbox; eventsOwnReply each batch on a
	// reply subscription of its own.
	events, eventsOwnReply *transport.Stream
}

// snapshots reads the latest event of each kind of the calls with events,
// of namespace ns or, when ns is empty, of the namespace each call's
// events tell; with confirm it looks up at the stream's leader each call
// the batched read did not find.
func (r *reader) snapshots(ctx context.Context, events *transport.Stream, ns string, callIDs []string, confirm bool) (map[string]*Snapshot, error) {
	out := make(map[string]*Snapshot, len(callIDs))
	for start := 0; start < len(callIDs); start += maxSubjectsPerRequest {
		end := min(start+maxSubjectsPerRequest, len(callIDs))
		filters := make([]string, 0, end-start)
		for _, id := range callIDs[start:end] {
			f, err := r.names.Filters().CallEvents(id)
			if err != nil {
				return nil, err
			}
			filters = append(filters, f)
			out[id] = &Snapshot{CallID: id, Namespace: ns}
		}
		var decodeErr error
		read := make(map[string][]*Event, end-start)
		err := events.GetBatch(ctx, transport.BatchRequest{MultiLast: filters}, func(seq uint64, msg *nats.Msg) bool {
			ev, err := r.decode(seq, msg)
			if err != nil {
				decodeErr = err
				return false
			}
			if out[ev.CallID] != nil {
				read[ev.CallID] = append(read[ev.CallID], ev)
			}
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("read call events: %w", err)
		}
		if decodeErr != nil {
			return nil, decodeErr
		}
		for id, events := range read {
			out[id].addAll(events)
		}
	}
	for _, s := range out {
		if confirm && !s.Exists() {
			if err := r.fromLeader(ctx, s); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// fromLeader fills in a call that the replica answering the batched
// read did not know: in a cluster it may lag behind the leader, which has
// acknowledged writes it does not hold yet. A call is taken not to exist
// only when the leader has no queued event for it either; without a
// namespace, the queued event of any namespace tells the call's (only the
// coordinator writes queued events).
func (r *reader) fromLeader(ctx context.Context, s *Snapshot) error {
	for _, kind := range snapshotKinds {
		found, err := r.addFromLeader(ctx, s, kind)
		if err != nil {
			return err
		}
		if !found && kind == messages.EventQueued {
			return nil
		}
	}
	return nil
}

// addFromLeader adds the call's last event of kind, as the stream's leader
// has it, to s, and reports whether there was one. A queued event read
// while s has no namespace gives it its own.
func (r *reader) addFromLeader(ctx context.Context, s *Snapshot, kind messages.EventKind) (bool, error) {
	var subject string
	var err error
	if s.Bucket == "" && kind == messages.EventQueued {
		subject, err = r.names.Filters().CallKind(s.CallID, kind)
	} else if s.Bucket != "" {
		subject, err = r.names.Filters().Event(s.Bucket, s.CallID, kind, s.Namespace)
	} else {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	msg, seq, err := r.events.GetLastFromLeader(ctx, subject)
	if errors.Is(err, transport.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read call events: %w", err)
	}
	ev, err := r.decode(seq, msg)
	if err != nil {
		return false, err
	}
	if s.Bucket == "" && (s.Namespace == "" || s.Namespace == ev.Namespace) {
		s.Namespace, s.Bucket = ev.Namespace, ev.Bucket
	}
	s.add(ev)
	return ev.Namespace == s.Namespace && ev.Bucket == s.Bucket, nil
}

// last is Ledger.Last, or Ledger.LastSeen without confirm.
func (r *reader) last(ctx context.Context, bucket, ns, callID string, kind messages.EventKind, confirm bool) (*Event, error) {
	var subject string
	var err error
	if ns == "" {
		subject, err = r.names.Filters().CallKind(callID, kind)
	} else {
		subject, err = r.names.Filters().Event(bucket, callID, kind, ns)
	}
	if err != nil {
		return nil, err
	}
	msg, seq, err := r.events.GetLast(ctx, subject)
	if confirm && errors.Is(err, transport.ErrNotFound) {
		msg, seq, err = r.events.GetLastFromLeader(ctx, subject)
	}
	if errors.Is(err, transport.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s event of call %s: %w", kind, callID, err)
	}
	ev, err := r.decode(seq, msg)
	if err != nil {
		return nil, fmt.Errorf("%s event of call %s: %w", kind, callID, err)
	}
	return ev, nil
}

// decode reads a stored event and the namespace and bucket of its subject.
func (r *reader) decode(seq uint64, msg *nats.Msg) (*Event, error) {
	ev := &Event{Seq: seq, Namespace: r.names.Events().Namespace(msg.Subject), Bucket: r.names.Events().Bucket(msg.Subject)}
	if _, err := messages.DecodeStored(messages.Header(msg.Header), msg.Data, &ev.CallEvent); err != nil {
		return nil, fmt.Errorf("event %d: %w", seq, err)
	}
	return ev, nil
}
