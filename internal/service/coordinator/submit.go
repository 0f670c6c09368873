package coordinator

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// submitPipeline checks a call and queues it (calls.submit), in stages:
// validate the request, admit the tool and its arguments, authorize the
// call (policy and approvals), record what was decided, and enqueue it.
// Each stage takes plain values and small interfaces.
type submitPipeline struct {
	limits submitLimits
	tools  toolCatalog
	// turns binds a call's turn to its agent; nil checks no turn.
	turns *turns
	// admission returns what an agent's exposure rules admit.
	admission func(agent string) *exposure.Admission
	schemas   *schemaCache
	policy    *atomic.Pointer[policy.Policy]
	grants    grants
	approvals *approvals
	audit     auditFunc
	queue     *callQueue
	tracer    trace.Tracer
	// usage records the calls it accepts, evidence for discovery when a
	// search of their turn found their tool; nil records none.
	usage *usage.Recorder
}

// maxUnacknowledgedInHand is how many submits a coordinator may have in
// hand for a quiet submit's write to go unacknowledged. A burst beyond it
// is paced by the stream's acknowledgements, as every write was before
// unacknowledged writes: a stream that falls behind a burst of
// unacknowledged writes leaves the calls unreadable for a while, their
// callers' looks find nothing, and their copies add to the burst.
const maxUnacknowledgedInHand = 128

// accepted counts a call the coordinator took (queued, or held for an
// approval) and hands it to the usage recorder with its authenticated
// user. The built-in tools' calls are no evidence: searching is not
// calling what was found.
func (p *submitPipeline) accepted(ctx context.Context, call *messages.CallRequest) {
	submitted(call)
	if p.usage == nil || call.Turn == "" || call.Namespace == BuiltinNamespace {
		return
	}
	user := ""
	if id := identityOf(ctx); id != nil {
		user = id.caller.String()
	}
	p.usage.Called(call, user)
}

// submitLimits are the bounds and defaults a submit is held to.
type submitLimits struct {
	maxArgumentsBytes   int
	defaultTimeout      time.Duration
	maxWait             time.Duration
	approvalTTL         time.Duration
	failWhenUnavailable bool
	// unavailableWait bounds the retries of a read while JetStream does
	// not answer (Config.UnavailableWait); 0 is DefaultUnavailableWait.
	unavailableWait time.Duration
}

// toolCatalog is what admission reads of the catalog.
type toolCatalog interface {
	// Lookup finds a tool the catalog holds in memory, without reading.
	Lookup(name string) (*catalog.Tool, bool)
	Get(ctx context.Context, name messages.ToolName) (*catalog.Tool, bool, error)
	Disabled(name messages.ToolName) (bool, string)
	ServingState(def *messages.ToolDefinition) (serving, live bool, reason string)
}

// grants tells whether an approval remembered for the call's agent and
// tool holds under a policy version.
type grants interface {
	granted(ctx context.Context, call *messages.CallRequest, version string) bool
}

// run is a submit. With then set and a call to queue without waiting for
// its result, it does not wait for the writes either: it reports pending,
// and then gets the outcome. Otherwise then is not called.
//
// A call ID that has a call already (an idempotency key or a call ID
// submitted again) is not read before the call is queued: the queued
// event is written only if the call ID has none (callQueue.sendFirst),
// and only a refused write reads the call, to answer as that call. A call
// that must wait for an approval is held without a queued write of its
// own, so for it the call ID is read first.
func (p *submitPipeline) run(ctx context.Context, sr *messages.SubmitRequest, headers map[string][]string, then func(*messages.SubmitReply, error)) (_ *messages.SubmitReply, pending bool, err error) {
	return p.runClaimed(ctx, sr, headers, then, nil)
}

// runClaimed is run; claimTurn, when set, claims the call's turn in place
// of the call's own claim, once the call is checked and before anything
// of it is decided or written (a batch claims its turn while its calls
// are checked).
func (p *submitPipeline) runClaimed(ctx context.Context, sr *messages.SubmitRequest, headers map[string][]string, then func(*messages.SubmitReply, error), claimTurn func(context.Context) error) (_ *messages.SubmitReply, pending bool, err error) {
	p.queue.inHand.Add(1)
	defer p.queue.inHand.Add(-1)
	ctx, span := p.tracer.Start(tracing.Extract(ctx, headers), "toolbus.submit", trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("toolbus.tool", sr.Tool), attribute.String("toolbus.agent", sr.Agent), attribute.String("gen_ai.tool.name", sr.Tool))
	}
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()

	name, read, err := validateSubmit(sr, p.limits.maxArgumentsBytes)
	if err != nil {
		return nil, false, err
	}
	if p.turns != nil && claimTurn == nil {
		if err := p.turns.claimForCall(ctx, sr.Turn, sr.Agent); err != nil {
			return nil, false, err
		}
	}
	tool, admission, err := p.admit(ctx, sr.Agent, name)
	if err != nil {
		if tool != nil && messages.CodeOf(err) == messages.CodeNotAdmitted {
			// Audited as a denial is, with the arguments as sent, redacted
			// as the tool's schema says.
			call := newCall(sr, name, tool, read.raw, "", time.Now().UTC(), p.limits.defaultTimeout)
			p.audit(ctx, messages.AuditNotAdmitted, call, &tool.Definition, policy.Decision{Reason: messages.AsError(err).Message}, "")
		}
		return nil, false, err
	}
	if claimTurn != nil {
		if err := claimTurn(ctx); err != nil {
			return nil, false, err
		}
	}
	read = toolArguments(p.schemas, tool, read)
	v, err := p.decide(ctx, sr, name, tool, read)
	if err != nil {
		return nil, false, err
	}
	args, err := checkToolArguments(p.schemas, tool, read)
	if err != nil {
		return nil, false, err
	}
	call := newCall(sr, name, tool, args.compact, args.digest, time.Now().UTC(), p.limits.defaultTimeout)
	v, err = p.authorize(ctx, call, tool, admission, &args.parsed, v)
	if err != nil {
		return nil, false, err
	}
	if v.approval != nil && (sr.IdempotencyKey != "" || sr.CallID != "") {
		// A call that waits for an approval is held, not queued with a
		// condition: a second submit of its ID (a copy, or a repeat of the
		// caller's) is answered as the held call, rather than held again.
		if reply, err := p.queue.existing(ctx, call, sr, false); reply != nil || err != nil {
			return reply, false, err
		}
	}
	reply, allowed, err := p.record(ctx, call, tool, &args.parsed, v)
	if reply != nil || err != nil {
		return reply, false, err
	}
	if allowed != nil {
		ctx = withQueuedAudit(ctx, allowed)
	}
	if then != nil && sr.Quiet && nats.Header(headers).Get(messages.HeaderReceipt) == "" && p.queue.inHand.Load() <= maxUnacknowledgedInHand {
		return p.enqueueUnacknowledged(ctx, call)
	}
	if then != nil {
		// Held in hand until the write's answer.
		p.queue.inHand.Add(1)
		answered := then
		then = func(r *messages.SubmitReply, err error) {
			p.queue.inHand.Add(-1)
			answered(r, err)
		}
	}
	queued, later, err := p.enqueue(ctx, call, sr, then)
	if then != nil && !later {
		p.queue.inHand.Add(-1) // then is not called
	}
	return queued, later, err
}

// enqueueUnacknowledged queues the call of a quiet submit that asked for
// no receipt, whose caller looks for the call if no result comes (see
// callQueue.sendUnacknowledged): it returns the queued state once the
// queued event is sent, which a quiet submit does not answer.
func (p *submitPipeline) enqueueUnacknowledged(ctx context.Context, call *messages.CallRequest) (*messages.SubmitReply, bool, error) {
	if err := p.queue.sendUnacknowledged(ctx, call); err != nil {
		return nil, false, err
	}
	p.accepted(ctx, call)
	return &messages.SubmitReply{CallID: call.CallID, State: messages.StateQueued}, false, nil
}

// validateSubmit checks a submit request on its own, before anything is
// read: the names, IDs and ranges it carries (SubmitRequest.Validate), and
// the size and depth of its arguments. It reads the arguments, once for
// the whole submit; arguments that are not JSON are refused once the tool
// is known (checkArguments), as the tool's schema may explain them.
func validateSubmit(sr *messages.SubmitRequest, maxArgumentsBytes int) (messages.ToolName, readArguments, error) {
	name, err := sr.ValidateTool()
	if err != nil {
		return messages.ToolName{}, readArguments{}, err
	}
	if len(sr.Arguments) > maxArgumentsBytes {
		return messages.ToolName{}, readArguments{}, messages.Errorf(messages.CodePayloadTooLarge, "arguments are %d bytes; at most %d", len(sr.Arguments), maxArgumentsBytes)
	}
	read := readArguments{raw: sr.Arguments}
	read.parsed, read.err = policy.ParseArguments(sr.Arguments)
	if read.err != nil {
		// Arguments nested too deeply are refused here, whatever else is
		// wrong with them.
		if err := messages.CheckJSONDepth(sr.Arguments); err != nil {
			return messages.ToolName{}, readArguments{}, err
		}
	}
	return name, read, nil
}

// readArguments are a submit's arguments as validateSubmit read them, or
// as toolArguments leaves them.
type readArguments struct {
	raw    messages.JSON
	parsed policy.Arguments
	err    error // why they are not JSON
	// unreadable is why a thinking tool's thought could not be taken out.
	unreadable error
}

// valid tells whether the arguments were read.
func (a *readArguments) valid() bool { return a.err == nil && a.unreadable == nil }

// checkedArguments are a call's arguments once its tool's schema holds
// them: read once, and the forms of them the call carries.
type checkedArguments struct {
	parsed  policy.Arguments
	compact messages.JSON
	digest  string
}

// admit finds the tool and checks that it can be called by the agent:
// it is in the catalog, enabled, served if it must be, and the agent's
// exposure rules do not exclude it. A tool they exclude is returned with
// the not_admitted refusal, for its record.
func (p *submitPipeline) admit(ctx context.Context, agent string, name messages.ToolName) (*catalog.Tool, *exposure.Admission, error) {
	// A tool the catalog holds is found without a read, and without the
	// retries' timer.
	tool, ok := p.tools.Lookup(name.String())
	if !ok {
		wait := p.limits.unavailableWait
		if wait <= 0 {
			wait = DefaultUnavailableWait
		}
		err := retryTransient(ctx, wait, func(ctx context.Context) (err error) {
			tool, ok, err = p.tools.Get(ctx, name)
			return err
		})
		if err != nil {
			return nil, nil, unavailable(err, "read tool %s", name)
		}
	}
	if !ok {
		return nil, nil, messages.Errorf(messages.CodeToolNotFound, "no tool %s in the catalog", name)
	}
	if off, reason := p.tools.Disabled(name); off {
		return nil, nil, messages.Errorf(messages.CodeToolDisabled, "tool %s is disabled: %s", name, reason)
	}
	// A tool whose source its live workers report down is refused even when
	// calls may wait for a worker: the workers that would take it cannot run it.
	if serving, live, reason := p.tools.ServingState(&tool.Definition); !serving && (p.limits.failWhenUnavailable || live) {
		return nil, nil, messages.Errorf(messages.CodeToolUnavailable, "tool %s is unavailable: %s", name, reason)
	}
	admission := p.admission(agent)
	if agent != "" && admission.Excluded(name.String()) {
		return tool, nil, messages.Errorf(messages.CodeNotAdmitted, "the exposure rules of agent %q exclude %s", agent, name)
	}
	return tool, admission, nil
}

// checkArguments checks the arguments against the tool's input schema and
// returns them compacted, with their digest.
func checkArguments(schemas *schemaCache, tool *catalog.Tool, read readArguments) (checkedArguments, error) {
	return checkToolArguments(schemas, tool, toolArguments(schemas, tool, read))
}

// toolArguments are the arguments as the tool gets them. A schema shown
// with think augmentation makes the model send a thought; it is not an
// argument of the tool. Arguments without it are read again (those that
// hold a thought, of think-augmented tools).
func toolArguments(schemas *schemaCache, tool *catalog.Tool, read readArguments) readArguments {
	stripped, found, err := schemas.stripThought(tool, read.raw)
	if err != nil {
		read.unreadable = err
		return read
	}
	if found {
		read.raw = stripped
		read.parsed, read.err = policy.ParseArguments(stripped)
	}
	return read
}

// checkToolArguments is checkArguments of arguments toolArguments read.
func checkToolArguments(schemas *schemaCache, tool *catalog.Tool, read readArguments) (checkedArguments, error) {
	name := tool.Definition.Name
	parsed := read.parsed
	if read.unreadable != nil {
		return checkedArguments{}, messages.Errorf(messages.CodeInvalidArguments, "arguments of %s: %v", name, read.unreadable)
	}
	if read.err != nil {
		return checkedArguments{}, messages.Errorf(messages.CodeInvalidArguments, "arguments of %s are not JSON: %v", name, read.err)
	}
	// The digest counts null as {}; the schema sees what was sent.
	if err := schemas.validate(tool, parsed.Sent()); err != nil {
		return checkedArguments{}, err
	}
	if at, number := parsed.InexactNumber(); number != "" {
		// The policy would compare the number as written, and the tool
		// get it rounded: the work item carries it as a 64-bit float.
		return checkedArguments{}, messages.Errorf(messages.CodeInvalidArguments,
			"arguments of %s: the number %s at %s has more digits than a 64-bit float holds, and would reach the tool as %s: send it rounded, or as a string", name, number, pointerOrRoot(at), roundedNumber(number))
	}
	compact, err := parsed.Compact()
	if err != nil {
		return checkedArguments{}, messages.Errorf(messages.CodeInvalidArguments, "arguments are not JSON: %v", err)
	}
	return checkedArguments{parsed: parsed, compact: compact, digest: parsed.Digest()}, nil
}

// newCall is the call a submit asks for, queued at now. Its deadline is the
// caller's timeout or the default, shortened to the tool's own; its ID comes
// from the idempotency key, the caller, the route, or is new.
func newCall(sr *messages.SubmitRequest, name messages.ToolName, tool *catalog.Tool, args messages.JSON, digest string, now time.Time, defaultTimeout time.Duration) *messages.CallRequest {
	timeout := defaultTimeout
	if sr.TimeoutMS > 0 {
		timeout = time.Duration(sr.TimeoutMS) * time.Millisecond
	}
	// The tool's timeout was written by its worker; one beyond the range
	// of a caller's (messages.MaxTimeoutMS) would overflow, and is ignored.
	if t := tool.Definition.Metadata.TimeoutMS; t > 0 && t <= messages.MaxTimeoutMS && time.Duration(t)*time.Millisecond < timeout {
		timeout = time.Duration(t) * time.Millisecond
	}
	call := &messages.CallRequest{
		Tool:            name.String(),
		Namespace:       name.Namespace,
		Method:          name.Method,
		Arguments:       args,
		Agent:           sr.Agent,
		Turn:            sr.Turn,
		ArgumentsDigest: digest,
		QueuedAt:        now,
		Deadline:        now.Add(timeout),
		Notify:          sr.Notify,
	}
	switch {
	case sr.IdempotencyKey != "":
		call.CallID = messages.IdempotentCallID(sr.Agent, sr.IdempotencyKey)
	case sr.CallID != "":
		call.CallID = sr.CallID
	case sr.Route != "":
		call.CallID = messages.RoutedCallID(sr.Route, messages.RandomToken())
	default:
		call.CallID = messages.RandomToken()
	}
	return call
}

// verdict is what policy and exposure rules say of one call.
type verdict struct {
	// approval is set when the call must wait for a decision.
	approval *messages.Approval
	// audit is the decision to record; empty when there is no policy or rule to account for.
	audit    string
	decision policy.Decision
	// policed is set when a policy decided the call.
	policed bool
}

// decide asks the policy about a call before its arguments are held to
// the tool's schema: a call the policy denies is denied, and audited,
// whatever its arguments are, and arguments that are not JSON are denied
// by the first rule that would test them (docs/policy.md). A denial is
// returned as an error with code denied.
func (p *submitPipeline) decide(ctx context.Context, sr *messages.SubmitRequest, name messages.ToolName, tool *catalog.Tool, args readArguments) (verdict, error) {
	pol := p.policy.Load()
	if pol == nil {
		return verdict{}, nil
	}
	req := policy.Request{Tool: tool.Definition, Agent: sr.Agent, Arguments: args.raw}
	if args.valid() {
		req.Parsed = args.parsed
	}
	v := verdict{decision: pol.Evaluate(req), audit: messages.AuditAllowed, policed: true}
	if v.decision.Effect == policy.Deny {
		// The audit record holds the arguments as sent, redacted as the
		// tool's schema says (all of them, if they are not JSON).
		call := newCall(sr, name, tool, args.raw, "", time.Now().UTC(), p.limits.defaultTimeout)
		p.audit(ctx, messages.AuditDenied, call, &tool.Definition, v.decision, "")
		return v, messages.Errorf(messages.CodeDenied, "policy denies %s to agent %q: %s", call.Tool, call.Agent, v.decision.Reason)
	}
	return v, nil
}

// authorize applies the agent's approval rules, and the policy's decision
// v (decide), to a call whose arguments args are as checkArguments read
// them.
func (p *submitPipeline) authorize(ctx context.Context, call *messages.CallRequest, tool *catalog.Tool, admission *exposure.Admission, args *policy.Arguments, v verdict) (verdict, error) {
	ask := v.policed && v.decision.Effect == policy.Ask
	mode := messages.ApprovalQueue
	var rule *exposure.Approval
	if t, ok := admission.Lookup(call.Tool); ok && t.Approval != nil && t.Approval.Mode != exposure.ApprovalNone {
		rule = t.Approval
		mode = string(t.Approval.Mode)
		ask = true
	}
	if !ask {
		return v, nil
	}
	if p.grants.granted(ctx, call, v.decision.Version) {
		v.audit = messages.AuditRemembered
		return v, nil
	}
	now := time.Now().UTC()
	v.audit = messages.AuditAsked
	v.approval = &messages.Approval{
		ApprovalID:      call.CallID,
		CallID:          call.CallID,
		Tool:            call.Tool,
		Agent:           call.Agent,
		Turn:            call.Turn,
		ArgumentsDigest: call.ArgumentsDigest,
		Arguments:       p.schemas.redaction(&tool.Definition).Redact(args),
		PolicyVersion:   v.decision.Version,
		RuleID:          v.decision.RuleID,
		Reason:          v.decision.Reason,
		Mode:            mode,
		State:           messages.ApprovalPending,
		CreatedAt:       now,
		ExpiresAt:       now.Add(p.limits.approvalTTL),
	}
	if rule != nil {
		v.approval.Title, v.approval.Message = rule.Title, rule.Message
		if v.approval.Reason == "" || !v.policed || v.decision.Effect != policy.Ask {
			v.approval.Reason = "the exposure rules ask for an approval of " + call.Tool
		}
	}
	return v, nil
}

// record keeps what authorize decided: a call that waits for an approval
// is held, its decision audited, and its reply returned; for any other
// call record returns no reply, for the call to be enqueued, and the
// decision to audit, if any, which the call's queued event carries (the
// audit stream's record is derived from it: auditCopier). args are the
// call's arguments as checkArguments read them.
func (p *submitPipeline) record(ctx context.Context, call *messages.CallRequest, tool *catalog.Tool, args *policy.Arguments, v verdict) (*messages.SubmitReply, *messages.QueuedAudit, error) {
	if v.approval != nil {
		if err := p.approvals.hold(ctx, call, v.approval); err != nil {
			return nil, nil, err
		}
		// Asked for by the exposure rules, the approval says why; the
		// policy's reason would be that it allowed the call.
		d := v.decision
		d.Reason = v.approval.Reason
		p.audit(ctx, v.audit, call, &tool.Definition, d, "")
		p.accepted(ctx, call)
		return &messages.SubmitReply{CallID: call.CallID, State: messages.StateAwaitingApproval, Approval: v.approval}, nil, nil
	}
	if v.audit == "" {
		return nil, nil, nil
	}
	return nil, queuedAudit(v.audit, call, p.schemas.redaction(&tool.Definition).Redact(args), v.decision), nil
}

// enqueue queues the call. Without wait and with then, it returns pending
// at once and then gets the outcome; with wait, it holds the reply until
// the result comes or the wait ends. A call that another submit queued
// first (the same call ID at the same moment) is answered as that call.
func (p *submitPipeline) enqueue(ctx context.Context, call *messages.CallRequest, sr *messages.SubmitRequest, then func(*messages.SubmitReply, error)) (*messages.SubmitReply, bool, error) {
	if then != nil && !sr.Wait {
		// The handler returns before then is called, ending ctx.
		bg := context.WithoutCancel(ctx)
		err := p.queue.sendFirst(ctx, call, func(duplicate bool, err error) {
			if err != nil {
				then(nil, err)
				return
			}
			if duplicate {
				// Off the ledger's goroutine: send reports a duplicate from one of its own.
				rctx, cancel := context.WithTimeout(bg, p.queue.retryBound())
				defer cancel()
				then(p.queue.duplicate(rctx, call, sr))
				return
			}
			p.accepted(ctx, call)
			then(&messages.SubmitReply{CallID: call.CallID, State: messages.StateQueued}, nil)
		})
		return nil, err == nil, err
	}
	if !sr.Wait {
		duplicate, err := p.queue.sendFirstWait(ctx, call)
		if err != nil {
			return nil, false, err
		}
		if duplicate {
			reply, err := p.queue.duplicate(ctx, call, sr)
			return reply, false, err
		}
		p.accepted(ctx, call)
		return &messages.SubmitReply{CallID: call.CallID, State: messages.StateQueued}, false, nil
	}
	// Subscribed before the call is published, so the result cannot slip past.
	writes, stop, err := p.queue.resultWrites(messages.TurnBucket(call.Turn), call.Namespace, call.CallID)
	if err != nil {
		return nil, false, err
	}
	defer stop()
	duplicate, err := p.queue.sendFirstWait(ctx, call)
	if err != nil {
		return nil, false, err
	}
	if duplicate {
		reply, err := p.queue.duplicate(ctx, call, sr)
		return reply, false, err
	}
	p.accepted(ctx, call)
	reply := &messages.SubmitReply{CallID: call.CallID, State: messages.StateQueued}
	reply, err = p.queue.awaitResult(ctx, messages.TurnBucket(call.Turn), call.Namespace, reply, writes, waitDuration(sr, call.Deadline, p.limits.maxWait))
	return reply, false, err
}

// pointerOrRoot is a JSON pointer as a message names it.
func pointerOrRoot(pointer string) string {
	if pointer == "" {
		return "(the arguments themselves)"
	}
	return pointer
}

// roundedNumber is a JSON number as a 64-bit float carries it.
func roundedNumber(text string) string {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return "an error (out of a float's range)"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
