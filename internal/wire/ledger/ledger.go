// Package ledger is the durable record of calls: every event of a call —
// queued, started, progress, log, cancel, result — is a message in the
// events stream on a subject derived from the call ID and ending with the
// called tool's namespace. The result is the call's commit point: it is
// written with an expected-last-sequence condition on the result subject
// of the call's namespace, so the first result wins and no later attempt
// can replace it.
//
// The coordinator writes a call's queued, approval and cancel events (and
// the results of calls it ends itself); workers write started, progress,
// log and result events, and the server lets a worker write only under its
// own namespace. So a call's namespace is the one its queued event names,
// and every read here ignores events of the call written under another
// namespace: a worker of one namespace cannot forge or pre-empt another's
// results.
//
// The ledger keeps nothing in memory; any number of processes share it. It
// reaches JetStream through internal/wire/transport and nats.go's jetstream
// package.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// ErrChanged reports that the call got a new event after the one the
// writer based its decision on.
var ErrChanged = errors.New("call changed concurrently")

// Ledger reads and writes call events. Its parts: a writer stores them, a
// reader reads the latest of each kind, a resultWait waits for one call's
// result; Turns reads the stream as the index of turns, and a Watcher
// (NewWatcher) follows a call live.
type Ledger struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names messages.Names
	// inbox receives acknowledgements and batched reads.
	inbox  *transport.Inbox
	pub    *transport.Publisher
	events *transport.Stream
	// eventsOwnReply reads batches each on a reply subscription of its
	// own: for occasional reads that should not start the inbox.
	eventsOwnReply *transport.Stream
	// w stores events, r reads them; acks is the latest of this ledger's
	// writes the stream acknowledged.
	w    *writer
	r    *reader
	acks *lastAck
	// reconnects tells waiters when the connection is back.
	reconnects *reconnects
	turns      *Turns
}

// New returns a ledger on the connection.
func New(nc *nats.Conn, js jetstream.JetStream, names messages.Names) *Ledger {
	inbox := transport.NewInbox(nc)
	l := &Ledger{
		nc: nc, js: js, names: names, inbox: inbox,
		pub:            transport.NewPublisher(nc, inbox),
		events:         transport.NewStream(nc, inbox, names.EventsStream()),
		eventsOwnReply: transport.NewStream(nc, nil, names.EventsStream()),
		acks:           &lastAck{eventsPrefix: strings.TrimSuffix(names.EventsSubjects(), ">")},
		reconnects:     &reconnects{nc: nc},
	}
	l.w = &writer{nc: nc, names: names, pub: l.pub, acks: l.acks}
	l.r = &reader{names: names, events: l.events, eventsOwnReply: l.eventsOwnReply}
	l.turns = &Turns{js: js, names: names, events: l.events, acks: l.acks}
	return l
}

// Close releases the ledger's subscription.
func (l *Ledger) Close() {
	l.inbox.Close()
	l.reconnects.close()
}

// EventMsg encodes an event of a call of namespace ns as the message that
// stores it, under bucket, the bucket of the call's turn
// (messages.TurnBucket); a queued event's bucket is that of its request's
// turn.
func (l *Ledger) EventMsg(bucket, ns string, ev *messages.CallEvent) (*nats.Msg, error) {
	return l.w.eventMsg(bucket, ns, ev, nil)
}

// Append stores an event of a call of namespace ns under bucket (see
// EventMsg) and waits until the stream has it.
func (l *Ledger) Append(ctx context.Context, bucket, ns string, ev *messages.CallEvent) (uint64, error) {
	msg, err := l.w.eventMsg(bucket, ns, ev, nil)
	if err != nil {
		return 0, err
	}
	seq, err := l.w.store(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("store %s event of call %s: %w", ev.Kind, ev.CallID, err)
	}
	return seq, nil
}

// Hold stores the queued event of a call that waits for an approval,
// marked so that its namespace's workers, to whom the events stream's
// consumer delivers it, acknowledge it without running the call
// (messages.HeaderAwaiting). Only an unmarked queued event is work.
func (l *Ledger) Hold(ctx context.Context, call *messages.CallRequest) (uint64, error) {
	h := make(nats.Header, 3)
	h.Set(messages.HeaderAwaiting, messages.AwaitingApproval)
	msg, err := l.w.eventMsg("", call.Namespace, &messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Time: call.QueuedAt, Request: call}, h)
	if err != nil {
		return 0, err
	}
	seq, err := l.w.store(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("store queued event of call %s: %w", call.CallID, err)
	}
	return seq, nil
}

// AppendAsync stores an event without waiting for the stream's
// acknowledgement. Events sent on one connection are stored in the order
// they were sent, so a later Append is stored after them.
func (l *Ledger) AppendAsync(bucket, ns string, ev *messages.CallEvent) error {
	msg, err := l.w.eventMsg(bucket, ns, ev, nil)
	if err != nil {
		return err
	}
	_, err = l.js.PublishMsgAsync(msg)
	return err
}

// Start records that an attempt started, unless the call already has a
// result, in which case JetStream drops it. It does not wait for JetStream:
// nothing depends on the start being stored, since the result is written
// conditionally anyway, and a worker learns that a call it runs already has
// a result when it next checks its calls.
func (l *Ledger) Start(bucket, ns string, ev *messages.CallEvent) error {
	ev.Kind = messages.EventStarted
	results, err := l.names.Filters().CallResult(bucket, ev.CallID, ns)
	if err != nil {
		return err
	}
	h := make(nats.Header, 6)
	h.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	h.Set(jetstream.ExpectedLastSubjSeqSubjHeader, results)
	msg, err := l.w.eventMsg(bucket, ns, ev, h)
	if err != nil {
		return err
	}
	if err := l.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("store start of call %s: %w", ev.CallID, err)
	}
	return nil
}

// Commit writes the result of a call of namespace ns under bucket unless
// it already has one under that bucket and ns (the write's condition is on
// messages.FilterNames.CallResult). It reports whether this result is the
// one that counts; if it is and notify is set (the caller's subject from
// the call request), a copy goes there.
func (l *Ledger) Commit(ctx context.Context, bucket, ns string, res *messages.CallResult, notify string) (bool, error) {
	results, err := l.names.Filters().CallResult(bucket, res.CallID, ns)
	if err != nil {
		return false, err
	}
	err = l.w.commit(ctx, bucket, ns, res, results, 0, notify)
	if errors.Is(err, ErrChanged) {
		return false, nil
	}
	if err == nil {
		finished(ns, res)
	}
	return err == nil, err
}

// CommitIfUnchanged writes the result of a call of namespace ns under
// bucket only if no event of the call but its queued event was stored
// under bucket and ns after lastSeq (a snapshot's ChangeSeq); otherwise it
// returns ErrChanged. Events written under another namespace or bucket do
// not count.
func (l *Ledger) CommitIfUnchanged(ctx context.Context, bucket, ns string, res *messages.CallResult, lastSeq uint64, notify string) error {
	filter, err := l.names.Filters().CallNamespaceEvents(bucket, res.CallID, ns)
	if err != nil {
		return err
	}
	if err := l.w.commit(ctx, bucket, ns, res, filter, lastSeq, notify); err != nil {
		return err
	}
	finished(ns, res)
	return nil
}

// finished counts a call whose result was stored.
func finished(ns string, res *messages.CallResult) {
	metrics.CallFinished(res.Tool, ns, string(res.Status), res.QueuedAt, res.StartedAt, res.FinishedAt)
}

func resultEvent(res *messages.CallResult) *messages.CallEvent {
	ev := &messages.CallEvent{CallID: res.CallID, Kind: messages.EventResult, Time: res.FinishedAt, Attempt: res.Attempt, Worker: res.Worker, Result: res}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	return ev
}

// CommitThen is Commit without waiting: then gets its outcome once the
// stream answers, on the ledger's inbox goroutine, and must not block. If
// CommitThen returns an error, then is not called.
func (l *Ledger) CommitThen(bucket, ns string, res *messages.CallResult, notify string, timeout time.Duration, then func(won bool, err error)) error {
	ev := resultEvent(res)
	results, err := l.names.Filters().CallResult(bucket, res.CallID, ns)
	if err != nil {
		return err
	}
	msg, err := l.w.conditionalMsg(bucket, ns, ev, results, 0)
	if err != nil {
		return err
	}
	return l.PublishThen(msg, timeout, func(_ uint64, duplicate bool, err error) {
		switch {
		case lostToADuplicate(duplicate, err):
			then(false, nil)
		case err == nil:
			l.w.sendCopy(bucket, ns, ev, notify)
			finished(ns, res)
			then(true, nil)
		case errors.Is(err, transport.ErrWrongLastSequence):
			then(false, nil)
		default:
			then(false, fmt.Errorf("store result event of call %s: %w", ev.CallID, err))
		}
	})
}

// Event is a stored event with its position in the events stream and the
// namespace and bucket its subject names.
type Event struct {
	messages.CallEvent
	Seq       uint64
	Namespace string
	Bucket    string
}

// coordinatorKind reports whether only the coordinator writes events of
// kind: the events that tell a call's namespace.
func coordinatorKind(kind messages.EventKind) bool {
	return kind == messages.EventQueued || kind == messages.EventApproval || kind == messages.EventCancel
}

// Snapshot is the latest event of each kind of one call, among the events
// written under the call's namespace and bucket.
type Snapshot struct {
	CallID string
	// Namespace is the call's: the one its queued event names, or the
	// one its reader knew. Empty while no such event was read.
	Namespace string
	// Bucket is the call's: the bucket of its turn, the one its queued
	// event (or another event only the coordinator writes) names, or the
	// one its reader knew. Empty while no such event was read.
	Bucket   string
	Queued   *Event
	Started  *Event
	Progress *Event
	Log      *Event
	Cancel   *Event
	Approval *Event
	Result   *Event
	// LastSeq is the sequence of the call's latest event under its namespace.
	LastSeq uint64
}

// ChangeSeq is the sequence of the call's latest event under its
// namespace other than its queued event, 0 if it has none: the condition
// of CommitIfUnchanged, whose filter leaves the queued event out (its
// subject names the turn too).
func (s *Snapshot) ChangeSeq() uint64 {
	var seq uint64
	for _, ev := range [...]*Event{s.Started, s.Progress, s.Log, s.Cancel, s.Approval, s.Result} {
		if ev != nil && ev.Seq > seq {
			seq = ev.Seq
		}
	}
	return seq
}

// addAll adds the events of the call that count: those written under
// its namespace and bucket, which, unless the snapshot already has them,
// are those of its queued event (or else of another event only the
// coordinator writes). Without such an event nothing counts.
func (s *Snapshot) addAll(events []*Event) {
	if s.Bucket == "" {
		for _, want := range [...]messages.EventKind{messages.EventQueued, messages.EventApproval, messages.EventCancel} {
			for _, ev := range events {
				if ev.Kind == want && (s.Namespace == "" || ev.Namespace == s.Namespace) {
					s.Namespace, s.Bucket = ev.Namespace, ev.Bucket
					break
				}
			}
			if s.Bucket != "" {
				break
			}
		}
	}
	for _, ev := range events {
		s.add(ev)
	}
}

// Exists reports whether anything is recorded for the call.
func (s *Snapshot) Exists() bool { return s.LastSeq > 0 }

// State derives the call's state from its events.
func (s *Snapshot) State() messages.CallState {
	switch {
	case s.Result != nil && s.Result.Result != nil:
		return s.Result.Result.Status
	case s.Started != nil:
		return messages.StateRunning
	case s.Approval != nil && s.Approval.Approval != nil && s.Approval.Approval.State == messages.ApprovalPending:
		return messages.StateAwaitingApproval
	default:
		return messages.StateQueued
	}
}

// Info is the snapshot as the API reports it.
func (s *Snapshot) Info() messages.CallInfo {
	info := messages.CallInfo{CallID: s.CallID, State: s.State(), CancelRequested: s.Cancel != nil}
	if q := s.Queued; q != nil && q.Request != nil {
		r := q.Request
		info.Tool, info.Agent, info.Turn, info.Arguments = r.Tool, r.Agent, r.Turn, r.Arguments
		info.QueuedAt, info.Deadline = r.QueuedAt, r.Deadline
	}
	if st := s.Started; st != nil {
		info.Attempt, info.Worker, info.StartedAt = st.Attempt, st.Worker, st.Time
	}
	if a := s.Approval; a != nil && a.Approval != nil {
		info.Approval = a.Approval
	}
	if p := s.Progress; p != nil && p.Progress != nil && s.Result == nil {
		progress := *p.Progress
		info.Progress = &progress
	}
	if r := s.Result; r != nil && r.Result != nil {
		info.Result = r.Result
		if info.Tool == "" {
			info.Tool = r.Result.Tool
		}
		if info.QueuedAt.IsZero() {
			info.QueuedAt = r.Result.QueuedAt
		}
		if r.Result.Attempt > 0 {
			info.Attempt, info.Worker = r.Result.Attempt, r.Result.Worker
		}
	}
	return info
}

// add adds ev if it was written under the snapshot's namespace and bucket.
func (s *Snapshot) add(ev *Event) {
	if ev.Namespace != s.Namespace || s.Namespace == "" || ev.Bucket != s.Bucket {
		return
	}
	s.Put(ev)
}

// Put puts ev in the snapshot as the latest event of its kind, whatever
// namespace and bucket it was written under: for a reader that checked
// them itself.
func (s *Snapshot) Put(ev *Event) {
	switch ev.Kind {
	case messages.EventQueued:
		s.Queued = ev
	case messages.EventStarted:
		s.Started = ev
	case messages.EventProgress:
		s.Progress = ev
	case messages.EventLog:
		s.Log = ev
	case messages.EventCancel:
		s.Cancel = ev
	case messages.EventApproval:
		s.Approval = ev
	case messages.EventResult:
		s.Result = ev
	}
	s.LastSeq = max(s.LastSeq, ev.Seq)
}

// maxSubjectsPerRequest keeps a batched read under the server's limit of
// 1,024 messages per request: each call has at most seven event subjects.
const maxSubjectsPerRequest = 140

// Snapshots reads the latest event of each kind of every call, in one
// request per 140 calls (maxSubjectsPerRequest). Calls with no events get
// an empty snapshot. Each call's namespace is the one its queued event
// names.
func (l *Ledger) Snapshots(ctx context.Context, callIDs ...string) (map[string]*Snapshot, error) {
	return l.r.snapshots(ctx, l.events, "", callIDs, true)
}

// snapshotKinds are the events a snapshot is made of, read one by one
// when a call's events are read from the leader or by a worker.
var snapshotKinds = []messages.EventKind{messages.EventQueued, messages.EventApproval, messages.EventStarted, messages.EventProgress, messages.EventLog, messages.EventCancel, messages.EventResult}

// Snapshot reads one call's latest events. Unlike Snapshots, whose reads
// any replica may answer, it asks the stream's leader whether a call that
// exists without a result has a result or a cancellation after all: its
// callers decide on that absence (whether to run a tool again, whether a
// decision still applies), and a replica may lag behind the leader.
func (l *Ledger) Snapshot(ctx context.Context, callID string) (*Snapshot, error) {
	return l.SnapshotIn(ctx, "", callID)
}

// SnapshotIn is Snapshot of a call its reader knows to be of namespace ns
// (a call it submitted, with the tool's namespace); an empty ns is
// Snapshot's, the queued event's.
func (l *Ledger) SnapshotIn(ctx context.Context, ns, callID string) (*Snapshot, error) {
	m, err := l.r.snapshots(ctx, l.events, ns, []string{callID}, true)
	if err != nil {
		return nil, err
	}
	s := m[callID]
	if !s.Exists() || s.Result != nil {
		return s, nil
	}
	for _, kind := range [...]messages.EventKind{messages.EventCancel, messages.EventResult} {
		if _, err := l.r.addFromLeader(ctx, s, kind); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SubjectAt returns the subject of the message the events stream holds
// at seq, or transport.ErrNotFound if it holds none there (any replica
// answers).
func (l *Ledger) SubjectAt(ctx context.Context, seq uint64) (string, error) {
	subject := ""
	err := l.eventsOwnReply.GetBatch(ctx, transport.BatchRequest{Seq: seq, Batch: 1}, func(got uint64, msg *nats.Msg) bool {
		if got == seq {
			subject = msg.Subject
		}
		return false
	})
	if err != nil {
		return "", err
	}
	if subject == "" {
		return "", transport.ErrNotFound
	}
	return subject, nil
}

// ConfirmResult completes a snapshot of a call that exists without a
// result with its result and cancellation as the stream's leader has
// them (see SnapshotIn): for a reader whose replica may lag behind.
func (l *Ledger) ConfirmResult(ctx context.Context, s *Snapshot) error {
	if !s.Exists() || s.Result != nil {
		return nil
	}
	for _, kind := range [...]messages.EventKind{messages.EventCancel, messages.EventResult} {
		if _, err := l.r.addFromLeader(ctx, s, kind); err != nil {
			return err
		}
	}
	return nil
}

// ReadOwn reads the latest events of the given kinds of a call of
// namespace ns with one direct get each, whose subject is in the request's
// API subject: the form of read that the server can confine to ns (a
// worker's user may read its own namespace's events only, and not with a
// batched get, whose subjects are in the request's body). Any replica
// answers, so in a cluster a read may miss an event the leader has just
// acknowledged; a worker relies on the result's write condition, which the
// leader checks, not on this read, to keep a second result out.
func (l *Ledger) ReadOwn(ctx context.Context, bucket, ns, callID string, kinds ...messages.EventKind) (*Snapshot, error) {
	s := &Snapshot{CallID: callID, Namespace: ns, Bucket: bucket}
	for _, kind := range kinds {
		subject, err := l.names.Filters().Event(bucket, callID, kind, ns)
		if err != nil {
			return nil, err
		}
		msg, seq, err := l.events.GetLast(ctx, subject)
		if errors.Is(err, transport.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s event of call %s: %w", kind, callID, err)
		}
		ev, err := l.r.decode(seq, msg)
		if err != nil {
			return nil, err
		}
		s.add(ev)
	}
	return s, nil
}

// AwaitResult returns the call's result once it is there, without a
// consumer on the server: it listens on the call's result subjects, and
// asks the stream, for a result written before it listened or missed
// during a reconnect, at first and then every few seconds. ns and bucket
// are the call's namespace and bucket if the caller knows them; empty,
// they are the ones the call's queued event names. Results written under
// another namespace or bucket are ignored.
func (l *Ledger) AwaitResult(ctx context.Context, bucket, ns, callID string) (*messages.CallResult, error) {
	if ns == "" || bucket == "" {
		ns, bucket = "", ""
	}
	var subject string
	var err error
	if ns != "" {
		subject, err = l.names.Events().Subject(bucket, callID, messages.EventResult, ns)
	} else {
		subject, err = l.names.Filters().CallKind(callID, messages.EventResult)
	}
	if err != nil {
		return nil, err
	}
	// Room for more than one write: under load a worker's result publish
	// may be sent again (and refused by JetStream), and every copy still
	// reaches a core subscriber; a full channel would only drop a copy and
	// report the subscription as a slow consumer.
	results := make(chan *nats.Msg, resultWrites)
	sub, err := l.nc.ChanSubscribe(subject, results)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	return newResultWait(l.r, l.reconnects, bucket, ns, callID).run(ctx, results, true, false)
}

// resultWrites is how many writes of a call's result subject a waiter
// holds before it reads them.
const resultWrites = 8

// ResultCheckInterval is how often a waiter asks the stream for a result it may have missed.
const ResultCheckInterval = 2 * time.Second

// ConfirmsAtLeader tells whether the n-th periodic check of a wait (from
// 1) confirms with the stream's leader that there is no result: the 1st,
// 2nd, 4th, 8th and so on. Any replica answers the other checks, and one
// that lags behind (a node catching up after a restart, under load) may
// not hold a result the leader stored, whose republished copy the waiter
// missed; a wait then finds it within about twice the time it has waited,
// and a long wait costs the leader a read only each time its length
// doubles.
func ConfirmsAtLeader(n int) bool { return n > 0 && n&(n-1) == 0 }

// LeaderChecks counts a wait's periodic checks and tells which of them
// confirm with the stream's leader (ConfirmsAtLeader). A confirmation
// that failed (the leader being elected, a read that timed out) is not
// counted: the next check asks the leader again, rather than the wait
// trusting replicas until its length doubles once more.
type LeaderChecks struct{ n int }

// Next counts a check and reports whether it confirms at the leader.
func (c *LeaderChecks) Next() bool {
	c.n++
	return ConfirmsAtLeader(c.n)
}

// Failed takes back the check Next counted, if it was to confirm at the
// leader: the next check is one.
func (c *LeaderChecks) Failed(confirmed bool) {
	if confirmed {
		c.n--
	}
}

// Restart counts from the first check again: the next confirms at the
// leader.
func (c *LeaderChecks) Restart() { c.n = 0 }

// WaitOn is AwaitResult for a caller that subscribed to the result subject
// itself (before submitting) and passes its channel.
func (l *Ledger) WaitOn(ctx context.Context, bucket, ns, callID string, results <-chan *nats.Msg) (*messages.CallResult, error) {
	return newResultWait(l.r, l.reconnects, bucket, ns, callID).run(ctx, results, false, true)
}

// WaitForWrite is AwaitResult for a caller that subscribed to the result
// subject itself and passes its channel: a message there is any attempt's
// write, and the committed result is read back. The stream is asked
// first, for a result stored before the subscription.
func (l *Ledger) WaitForWrite(ctx context.Context, bucket, ns, callID string, writes <-chan *nats.Msg) (*messages.CallResult, error) {
	return newResultWait(l.r, l.reconnects, bucket, ns, callID).run(ctx, writes, true, false)
}

// Last returns the latest event of one kind of a call of namespace ns
// under bucket, or nil if it has none. None is confirmed with the stream's leader, as the
// replica that answered may lag behind it. An empty ns reads the latest
// event of the kind under any namespace: for the kinds only the
// coordinator writes (queued, approval, cancel), the one that tells the
// call's namespace (Event.Namespace).
func (l *Ledger) Last(ctx context.Context, bucket, ns, callID string, kind messages.EventKind) (*Event, error) {
	return l.r.last(ctx, bucket, ns, callID, kind, true)
}

// LastSeen is Last without the leader's confirmation of none: for a caller
// that will look again anyway, such as a wait's periodic check.
func (l *Ledger) LastSeen(ctx context.Context, bucket, ns, callID string, kind messages.EventKind) (*Event, error) {
	return l.r.last(ctx, bucket, ns, callID, kind, false)
}

// CallRef names a call's events: its ID, its namespace and the bucket of
// its turn.
type CallRef struct {
	Bucket, Namespace, CallID string
}

// maxResultsPerRequest keeps a batched read of results under the
// server's limit of 1,024 messages per request: one subject per call.
const maxResultsPerRequest = 1000

// WithoutResult returns the calls, of those given, that have no result
// under their namespace and bucket: a batched read of their result
// subjects, which any replica answers, and, for each call it found
// without one, a read at the stream's leader, since a replica may lag
// behind the leader's acknowledged writes.
func (l *Ledger) WithoutResult(ctx context.Context, calls []CallRef) ([]CallRef, error) {
	var missing []CallRef
	for start := 0; start < len(calls); start += maxResultsPerRequest {
		chunk := calls[start:min(start+maxResultsPerRequest, len(calls))]
		filters := make([]string, len(chunk))
		for i, c := range chunk {
			f, err := l.names.Filters().CallResult(c.Bucket, c.CallID, c.Namespace)
			if err != nil {
				return nil, err
			}
			filters[i] = f
		}
		found := make(map[string]bool, len(chunk))
		err := l.events.GetBatch(ctx, transport.BatchRequest{MultiLast: filters}, func(_ uint64, msg *nats.Msg) bool {
			found[msg.Subject] = true
			return true
		})
		if err != nil && !errors.Is(err, transport.ErrNotFound) {
			return nil, fmt.Errorf("read results: %w", err)
		}
		for i, c := range chunk {
			if found[filters[i]] {
				continue
			}
			_, _, err := l.events.GetLastFromLeader(ctx, filters[i])
			switch {
			case errors.Is(err, transport.ErrNotFound):
				missing = append(missing, c)
			case err != nil:
				return nil, fmt.Errorf("read the result of call %s: %w", c.CallID, err)
			}
		}
	}
	return missing, nil
}
