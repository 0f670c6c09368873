package coordinator

import (
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
		rec.Arguments = policy.Redact(def.InputSchema, call.Arguments)
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
