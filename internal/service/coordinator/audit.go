package coordinator

import (
	"bytes"
	"context"
	"log/slog"
	"time"

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
	log   *slog.Logger
}

// record records a decision without waiting for it to be stored; by is who
// decided, when a person did.
func (a *auditor) record(_ context.Context, decision string, call *messages.CallRequest, def *messages.ToolDefinition, d policy.Decision, by string) {
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
	subject, err := a.names.Audit().Subject(decision)
	if err != nil {
		a.log.Warn("audit record not stored", "decision", decision, "call", call.CallID, "error", err)
		return
	}
	msg, err := newMsg(subject, rec)
	if err != nil {
		a.log.Warn("audit record not stored", "decision", decision, "call", call.CallID, "error", err)
		return
	}
	if _, err := a.js.PublishMsgAsync(msg); err != nil {
		a.log.Warn("audit record not stored", "decision", decision, "call", call.CallID, "error", err)
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
