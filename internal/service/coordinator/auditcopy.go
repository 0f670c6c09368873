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

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

const (
	// DefaultAuditCopyInterval is how often an idle audit copier looks
	// for queued events to copy (Config.AuditCopyInterval).
	DefaultAuditCopyInterval = 100 * time.Millisecond
	// auditCopyRead is the most queued events one round reads.
	auditCopyRead = 1000
	// auditBatchBytes bounds the arguments of one AuditBatch's records,
	// far below the server's max_payload.
	auditBatchBytes = 256 << 10
)

// auditCopier derives the audit records of the calls a policy let through
// from their queued events, which carry the decision (QueuedAudit): it
// reads the events stream's queued events in order and appends their
// records to the audit stream in AuditBatch messages on
// "<prefix>.audit.calls". The audit stream holds its own cursor: each
// batch names the last events sequence it covers, and is written only if
// the subject's last message is still the batch it continues from
// (Nats-Expected-Last-Subject-Sequence). So every coordinator runs a
// copier, a copier that stops or dies leaves the cursor where its last
// batch put it, and two copiers at once write each record once: the
// second one's batch is refused, and it reads again.
type auditCopier struct {
	names  messages.Names
	js     jetstream.JetStream
	events *transport.Stream
	audit  *transport.Stream
	// interval is how long an idle copier waits before it looks again.
	interval time.Duration
	log      *slog.Logger

	// next is the events sequence this copier reads from next: past its
	// last batch, or past events that held no decision to copy.
	next uint64
	// failing tells that the last round failed, so that only the first
	// failure of a run of them is logged as a warning.
	failing bool
}

// run copies until ctx ends.
func (a *auditCopier) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		more, err := a.round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !a.failing {
				a.log.Warn("audit records not copied yet; trying again", "error", err)
			}
			a.failing = true
		case err == nil:
			a.failing = false
		}
		if more {
			timer.Reset(0)
		} else {
			timer.Reset(a.interval)
		}
	}
}

// round copies one batch, and tells whether more may be waiting.
func (a *auditCopier) round(ctx context.Context) (more bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	subject, err := a.names.Audit().Subject(messages.AuditCalls)
	if err != nil {
		return false, err
	}
	// The last batch, read with the subject in the request's body: the
	// coordinator's user may read any stream that way (docs/security.md).
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
		return false, fmt.Errorf("read the last audit batch: %w", err)
	case decodeErr != nil:
		return false, fmt.Errorf("audit batch %d: %w", lastSeq, decodeErr)
	}
	from := max(a.next, last.Through+1)
	batch := messages.AuditBatch{Records: []messages.AuditRecord{}}
	read, size := 0, 0
	filter, err := a.names.Filters().EventKind(messages.EventQueued)
	if err != nil {
		return false, err
	}
	err = a.events.GetBatch(ctx, transport.BatchRequest{Seq: from, NextBySubject: filter, Batch: auditCopyRead}, func(seq uint64, m *nats.Msg) bool {
		read++
		batch.Through = seq
		var ev messages.CallEvent
		if _, err := messages.DecodeStored(messages.Header(m.Header), m.Data, &ev); err != nil || ev.Audit == nil || ev.Request == nil {
			return true
		}
		rec := auditRecordOf(&ev)
		batch.Records = append(batch.Records, rec)
		size += len(rec.Arguments) + 256
		return size < auditBatchBytes
	})
	if err != nil {
		return false, fmt.Errorf("read queued events from %d: %w", from, err)
	}
	full := read == auditCopyRead || size >= auditBatchBytes
	if read == 0 {
		return false, nil
	}
	if len(batch.Records) == 0 {
		// Nothing to record up to here: no batch is written for it.
		a.next = batch.Through + 1
		return full, nil
	}
	out, err := newMsg(subject, &batch)
	if err != nil {
		return false, err
	}
	// One ID per range: a write answered too late and sent again is
	// stored once.
	out.Header.Set(messages.HeaderMsgID, "audit.calls."+strconv.FormatUint(batch.Through, 10))
	_, err = a.js.PublishMsg(ctx, out, jetstream.WithExpectLastSequencePerSubject(lastSeq))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		// Another copier wrote the next batch: read from where it ended.
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("write the audit batch through %d: %w", batch.Through, err)
	}
	a.next = batch.Through + 1
	return full, nil
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
