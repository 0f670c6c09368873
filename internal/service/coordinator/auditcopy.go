package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/lease"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

const (
	// DefaultAuditCopyInterval is the longest an audit record waits in a
	// copier before it is written (Config.AuditCopyInterval).
	DefaultAuditCopyInterval = 100 * time.Millisecond
	// DefaultSweepInterval is how often a coordinator sweeps
	// (Config.SweepInterval).
	DefaultSweepInterval = 5 * time.Second
	// auditBatchRecords is the most records one AuditBatch holds.
	auditBatchRecords = 1000
	// auditBatchBytes bounds the arguments of one AuditBatch's records,
	// far below the server's max_payload.
	auditBatchBytes = 256 << 10
	// auditCopyRetry is the longest a copier whose reads or writes fail
	// waits before it tries again.
	auditCopyRetry = 5 * time.Second
)

// auditCopier derives the audit records of the calls a policy let through
// from their queued events, which carry the decision (QueuedAudit): it
// takes the queued events that arrived, in order, from a consumer of its
// own once an interval, and appends their records to the audit stream in
// AuditBatch messages on "<prefix>.audit.calls". The audit stream holds its
// own cursor: each batch names the last events sequence it covers, and
// is written only if the subject's last message is still the batch it
// continues from (Nats-Expected-Last-Subject-Sequence). So a copier that
// stops or dies leaves the cursor where its last batch put it, and two
// copiers at once write each record once: the second one's batch is
// refused, and it drops what the first one wrote. Every coordinator has a
// copier, and the holder of the audit copy duty runs it (duties).
type auditCopier struct {
	names messages.Names
	js    jetstream.JetStream
	audit *transport.Stream
	// interval is the longest a record waits before its batch is written.
	interval time.Duration
	// duty, when set, is the lease under which this copier copies: one
	// coordinator's at a time (duties).
	duty *lease.Lease
	log  *slog.Logger

	// lastSeq is the audit stream's sequence of the subject's last batch,
	// as this copier last knew it (0: none), and through the last events
	// sequence that batch covers.
	lastSeq, through uint64
	// read is the last events sequence delivered to this copier.
	read uint64
	// pending holds the records read and not yet written, seqs their
	// events sequences.
	pending []messages.AuditRecord
	seqs    []uint64
	// failing tells that the last attempt failed, so that only the first
	// failure of a run of them is logged as a warning.
	failing bool
}

// run copies until ctx ends, starting again after a failure, while this
// coordinator holds the duty when one is set.
func (a *auditCopier) run(ctx context.Context) {
	var wait time.Duration
	for {
		var err error
		if a.duty == nil {
			err = a.follow(ctx)
		} else {
			whileHeld(ctx, a.duty, func(ctx context.Context) { err = a.follow(ctx) })
			// follow ends without an error only when its context does:
			// here, when the lease stopped being valid.
			if ctx.Err() == nil && err == nil {
				// Another coordinator copies now; what this one read and
				// did not write, the other reads from the audit stream's
				// last batch on.
				a.forget()
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		if !a.failing {
			wait = min(a.interval, auditCopyRetry)
		}
		a.failed(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, auditCopyRetry)
	}
}

// forget drops what was read and not written, so that a copier that
// takes the duty again starts from the audit stream's last batch.
func (a *auditCopier) forget() {
	a.pending, a.seqs, a.read, a.failing = nil, nil, 0, false
}

// failed logs the first of a run of failures.
func (a *auditCopier) failed(err error) {
	if !a.failing {
		a.log.Warn("audit records not copied yet; trying again", "error", err)
	}
	a.failing = true
}

// follow reads where the audit stream's last batch ends, then copies
// what a consumer of the events stream's queued events holds from there
// in rounds an interval apart, until ctx ends or a read fails.
func (a *auditCopier) follow(ctx context.Context) error {
	if err := a.readLast(ctx); err != nil {
		return err
	}
	a.read = max(a.read, a.through)
	a.drop()
	filter, err := a.names.Filters().EventKind(messages.EventQueued)
	if err != nil {
		return err
	}
	// An ephemeral consumer without acknowledgements, in memory: what it
	// delivers is checked for gaps (its delivery sequence), and a gap, a
	// lost consumer or a restart reads again from the last sequence read.
	cons, err := a.js.CreateConsumer(ctx, a.names.EventsStream(), jetstream.ConsumerConfig{
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       a.read + 1,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: max(30*time.Second, 10*a.interval),
	})
	if err != nil {
		return fmt.Errorf("follow the queued events from %d: %w", a.read+1, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.js.DeleteConsumer(ctx, a.names.EventsStream(), cons.CachedInfo().Name)
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var delivered uint64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		// Records wait in memory only up to a batch: while the audit
		// stream refuses them, the consumer holds the rest.
		room := auditBatchRecords - len(a.pending)
		got := 0
		if room > 0 && batchBytes(a.pending) < auditBatchBytes {
			batch, err := cons.FetchNoWait(room)
			if err != nil {
				return fmt.Errorf("read queued events after %d: %w", a.read, err)
			}
			for msg := range batch.Messages() {
				meta, err := msg.Metadata()
				if err != nil || meta.Sequence.Consumer != delivered+1 {
					return fmt.Errorf("queued events after %d came with a gap", a.read)
				}
				delivered++
				got++
				a.add(meta.Sequence.Stream, msg)
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				return fmt.Errorf("read queued events after %d: %w", a.read, err)
			}
		}
		if err := a.flush(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.failed(err)
			timer.Reset(min(max(a.interval, time.Second), auditCopyRetry))
			continue
		}
		a.failing = false
		if (room > 0 && got == room) || len(a.pending) > 0 {
			timer.Reset(0)
		} else {
			timer.Reset(a.interval)
		}
	}
}

// add takes a delivered queued event's record, if it holds one to copy
// that no batch covers yet.
func (a *auditCopier) add(seq uint64, msg jetstream.Msg) {
	a.read = max(a.read, seq)
	if seq <= a.through {
		return
	}
	var ev messages.CallEvent
	if _, err := messages.DecodeStored(messages.Header(msg.Headers()), msg.Data(), &ev); err != nil || ev.Audit == nil || ev.Request == nil {
		return
	}
	a.pending = append(a.pending, auditRecordOf(&ev))
	a.seqs = append(a.seqs, seq)
}

// recordBytes is what a record counts toward auditBatchBytes: its
// arguments, and about what the rest of it takes.
func recordBytes(rec *messages.AuditRecord) int { return len(rec.Arguments) + 256 }

// batchBytes is what records count toward auditBatchBytes.
func batchBytes(records []messages.AuditRecord) int {
	n := 0
	for i := range records {
		n += recordBytes(&records[i])
	}
	return n
}

// drop forgets the pending records a batch already covers.
func (a *auditCopier) drop() {
	n := 0
	for n < len(a.seqs) && a.seqs[n] <= a.through {
		n++
	}
	if n == 0 {
		return
	}
	a.pending = append(a.pending[:0], a.pending[n:]...)
	a.seqs = append(a.seqs[:0], a.seqs[n:]...)
}

// readLast reads the audit subject's last batch.
func (a *auditCopier) readLast(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	subject, err := a.names.Audit().Subject(messages.AuditCalls)
	if err != nil {
		return err
	}
	// Read with the subject in the request's body: the coordinator's user
	// may read any stream that way (docs/security.md).
	var last messages.AuditBatch
	var lastSeq uint64
	var decodeErr error
	err = a.audit.GetBatch(ctx, transport.BatchRequest{MultiLast: []string{subject}}, func(seq uint64, msg *nats.Msg) bool {
		lastSeq = seq
		_, decodeErr = messages.DecodeStored(messages.Header(msg.Header), msg.Data, &last)
		return false
	})
	switch {
	case err != nil:
		return fmt.Errorf("read the last audit batch: %w", err)
	case decodeErr != nil:
		return fmt.Errorf("audit batch %d: %w", lastSeq, decodeErr)
	}
	a.lastSeq = lastSeq
	// Never back: a batch that aged out of the audit stream does not make
	// this copier write again what it already wrote.
	a.through = max(a.through, last.Through)
	return nil
}

// flush writes the pending records as one batch, continuing the last one
// this copier knows of. A batch written by another copier first makes it
// read the last batch again and drop what that one covers.
func (a *auditCopier) flush(ctx context.Context) error {
	if len(a.pending) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	subject, err := a.names.Audit().Subject(messages.AuditCalls)
	if err != nil {
		return err
	}
	// At most a batch's records and bytes (and at least one record): the
	// rest go in the next batch.
	n, size := 0, 0
	for n < len(a.pending) && n < auditBatchRecords && (n == 0 || size < auditBatchBytes) {
		size += recordBytes(&a.pending[n])
		n++
	}
	through := a.read
	if n < len(a.pending) {
		through = a.seqs[n-1]
	}
	batch := messages.AuditBatch{Through: through, Records: a.pending[:n]}
	out, err := newMsg(subject, &batch)
	if err != nil {
		return err
	}
	// One ID per range: a write answered too late and sent again is
	// stored once.
	out.Header.Set(messages.HeaderMsgID, "audit.calls."+strconv.FormatUint(batch.Through, 10))
	ack, err := a.js.PublishMsg(ctx, out, jetstream.WithExpectLastSequencePerSubject(a.lastSeq))
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence,
		err == nil && ack.Duplicate:
		// Another copier wrote the next batch, or this one's earlier
		// attempt was stored after all: read where the subject ends.
		if err := a.readLast(ctx); err != nil {
			return err
		}
		a.drop()
		return nil
	case err != nil:
		return fmt.Errorf("write the audit batch through %d: %w", batch.Through, err)
	}
	a.lastSeq, a.through = ack.Sequence, batch.Through
	a.drop()
	return nil
}

// auditRecordOf is the audit record of a queued event that carries its
// call's decision.
func auditRecordOf(ev *messages.CallEvent) messages.AuditRecord {
	call, qa := ev.Request, ev.Audit
	args := qa.Arguments
	if len(args) == 0 {
		args = call.Arguments
	}
	return messages.AuditRecord{
		Time:          call.QueuedAt,
		Decision:      qa.Decision,
		CallID:        call.CallID,
		Tool:          call.Tool,
		Agent:         call.Agent,
		Turn:          call.Turn,
		Arguments:     args,
		PolicyVersion: qa.PolicyVersion,
		RuleID:        qa.RuleID,
		Reason:        qa.Reason,
	}
}
