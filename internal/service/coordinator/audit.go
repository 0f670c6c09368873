package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// auditor records decisions about calls in the audit stream.
type auditor struct {
	names messages.Names
	js    jetstream.JetStream
	// cache holds the tools' schemas compiled for redaction.
	cache *redactions
	// unavailableWait bounds how long a decision's record is written
	// again while JetStream does not answer (Config.UnavailableWait).
	unavailableWait time.Duration
	log             *slog.Logger
}

// record stores the record of a decision before it returns, so that the
// answer that follows it (a denial, an approval's outcome) is in
// audit.list by the time its asker reads it; by is who decided, when a
// person did. The request's end does not cut the write short.
func (a *auditor) record(ctx context.Context, decision string, call *messages.CallRequest, def *messages.ToolDefinition, d policy.Decision, by string) {
	rec := &messages.AuditRecord{
		Time:          time.Now().UTC(),
		Decision:      decision,
		CallID:        call.CallID,
		Tool:          call.Tool,
		Agent:         call.Agent,
		Turn:          call.Turn,
		PolicyVersion: d.Version,
		RuleID:        d.RuleID,
		Reason:        d.Reason,
		By:            by,
	}
	if def != nil {
		rec.Arguments = a.cache.of(def).RedactJSON(call.Arguments)
	}
	a.store(ctx, rec, a.unavailableWait)
}

// recordForbidden records a refused request before it returns. Its write
// is tried once, for at most one attempt's time: a flood of forbidden
// requests while JetStream is away does not hold the coordinator's
// handlers for long.
func (a *auditor) recordForbidden(rec *messages.AuditRecord) {
	rec.Time = time.Now().UTC()
	a.store(context.Background(), rec, 0)
}

// store writes rec to the audit stream and waits for the server to store
// it, trying again within bound while JetStream is unavailable (once when
// bound is zero). A failure is logged: the decision stands either way.
// Each record has a message ID of its own, so a write tried again after
// an answer that was lost is stored once.
func (a *auditor) store(ctx context.Context, rec *messages.AuditRecord, bound time.Duration) {
	subject, err := a.names.Audit().Subject(rec.Decision)
	var msg *nats.Msg
	if err == nil {
		msg, err = newMsg(subject, rec)
	}
	if err == nil {
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("audit.%s.%s.%d", rec.Decision, rec.CallID, rec.Time.UnixNano()))
		err = retryTransient(context.WithoutCancel(ctx), bound, func(ctx context.Context) error {
			_, err := a.js.PublishMsg(ctx, msg)
			return err
		})
	}
	if err != nil {
		a.log.Warn("audit record not stored", "decision", rec.Decision, "call", rec.CallID, "by", rec.By, "error", err)
	}
}

// queuedAudit is what the queued event of a call carries of the decision
// that let it through: the call's arguments as redacted for the audit log
// only when redaction changed them.
func queuedAudit(decision string, call *messages.CallRequest, redacted messages.JSON, d policy.Decision) *messages.QueuedAudit {
	qa := &messages.QueuedAudit{Decision: decision, PolicyVersion: d.Version, RuleID: d.RuleID, Reason: d.Reason}
	if !bytes.Equal(redacted, call.Arguments) {
		qa.Arguments = redacted
	}
	return qa
}

// queuedAuditKey is the context key of the decision a call's queued event
// carries.
type queuedAuditKey struct{}

// withQueuedAudit is ctx carrying the decision that the queued event of
// the call being submitted records.
func withQueuedAudit(ctx context.Context, qa *messages.QueuedAudit) context.Context {
	return context.WithValue(ctx, queuedAuditKey{}, qa)
}

// queuedAuditOf returns the decision withQueuedAudit gave ctx, or nil.
func queuedAuditOf(ctx context.Context) *messages.QueuedAudit {
	qa, _ := ctx.Value(queuedAuditKey{}).(*messages.QueuedAudit)
	return qa
}
