package coordinator

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
	"github.com/toolbus/toolbus/pkg/messages"
)

// request is one API request with the codec it arrived in; replies use the same codec.
type request struct {
	micro.Request
	codec messages.Codec
	// version is the major protocol version the request is answered in:
	// its own (see versionsOf).
	version  string
	endpoint string
	// holds counts who still works on the request: its handler, and the
	// completion of work the handler left running (see later). The last
	// one to finish calls release.
	holds   atomic.Int32
	release func()
	// guard checks the decoded request against its caller's identity.
	guard *guard
	// inHand is the coordinator's requests in hand, which a copy of the
	// request may repeat.
	inHand *requestsInHand
}

// admit checks the decoded request v against the caller's identity (see
// guard.admit), and returns the context that carries it.
func (r *request) admit(ctx context.Context, v any) (context.Context, error) {
	return r.guard.admitRequest(ctx, r.endpoint, r.Request, v)
}

// later tells that part of the request's work goes on after its handler
// returns; that part calls done when it ends.
func (r *request) later() (done func()) {
	r.holds.Add(1)
	return r.done
}

func (r *request) done() {
	if r.holds.Add(-1) == 0 {
		r.release()
	}
}

// decode reads the request body into v.
func (r *request) decode(v any) error {
	if len(r.Data()) == 0 {
		return nil
	}
	return r.codec.Unmarshal(r.Data(), v)
}

type handlerFunc func(ctx context.Context, req *request) (any, error)

// endpoints is the API table: each endpoint's handler.
func (c *Coordinator) endpoints() map[string]handlerFunc {
	return map[string]handlerFunc{
		messages.EndpointToolsList:       decoding(c.view.list),
		messages.EndpointCallsSubmit:     c.submit,
		messages.EndpointCallsGet:        decoding(c.getCallTraced),
		messages.EndpointCallsEvents:     decoding(c.follower.callEvents),
		messages.EndpointCallsFullResult: decoding(c.follower.fullResult),
		messages.EndpointCallsList:       decoding(c.logReads.listCalls),
		messages.EndpointCallsCancel:     decoding(c.calls.cancel),
		messages.EndpointTurnsGet:        decoding(c.follower.getTurn),
		messages.EndpointToolsActivate:   decoding(c.view.activate),
		messages.EndpointApprovalsList:   decoding(c.approvals.list),
		messages.EndpointApprovalsDecide: traced(decoding(c.approvals.decide)),
		messages.EndpointApprovalsAnswer: traced(decoding(c.approvals.answer)),
		messages.EndpointToolsEnable:     decoding(c.switches.enable),
		messages.EndpointToolsDisable:    decoding(c.switches.disable),
		messages.EndpointToolsRemove:     decoding(c.switches.remove),
		messages.EndpointToolsDiscover:   metered(decoding(c.view.discover)),

		messages.EndpointCallsSubmitBatch: c.batches.submitBatch,
		messages.EndpointCallsResults:     decoding(c.batches.results),

		messages.EndpointAuditList:   decoding(c.listAudit),
		messages.EndpointWorkersList: decoding(c.listWorkers),
		messages.EndpointStatsCalls:  decoding(c.logReads.callStats),

		messages.EndpointPolicyExplain: decoding(c.view.explainPolicy),

		messages.EndpointLearningStatus:  decoding(c.learning.status),
		messages.EndpointLearningEnable:  decoding(c.learning.enable),
		messages.EndpointLearningDisable: decoding(c.learning.disable),
		messages.EndpointLearningReset:   decoding(c.learning.reset),
		messages.EndpointInfo:            decoding(c.info),
	}
}

// versionsOf are the major versions whose requests endpoint answers
// (protocol.md, Compatibility): every API endpoint answers this version
// and the one before, whose messages are the same; info answers any, so
// that every client can learn what is spoken; the workers' consumer
// requests, which version 2 workers never sent, answer this version only.
func versionsOf(endpoint string) []string {
	switch endpoint {
	case messages.EndpointInfo:
		return nil
	case endpointConsumers:
		return []string{messages.ProtocolVersion}
	}
	return messages.APIVersions
}

// info is the info endpoint: the versions the API answers.
func (c *Coordinator) info(context.Context, *messages.InfoRequest) (*messages.InfoReply, error) {
	return &messages.InfoReply{Version: messages.ProtocolVersion, Versions: messages.APIVersions, Coordinator: Version}, nil
}

// decoding is a handler that decodes its request into a Req for answer,
// and refuses it if it does not pass its own Validate.
func decoding[Req, Reply any](answer func(context.Context, *Req) (Reply, error)) handlerFunc {
	return func(ctx context.Context, req *request) (any, error) {
		var r Req
		if err := req.decode(&r); err != nil {
			return nil, err
		}
		ctx, err := req.admit(ctx, &r)
		if err != nil {
			return nil, err
		}
		if v, ok := any(&r).(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				return nil, err
			}
		}
		if holdsAWait(&r) {
			done, isCopy := req.takeHeld(ctx)
			if isCopy {
				return noReply{}, nil // the first's answer answers it
			}
			defer done()
		}
		reply, err := answer(ctx, &r)
		if err != nil {
			return nil, err
		}
		return reply, nil
	}
}

// submit is calls.submit. A quiet submit is over for its caller once the
// call is on its way: the outcome of the writes is awaited on the
// ledger's goroutine, and only a failure is answered.
func (c *Coordinator) submit(ctx context.Context, req *request) (any, error) {
	var sr messages.SubmitRequest
	if err := req.decode(&sr); err != nil {
		return nil, err
	}
	ctx, err := req.admit(ctx, &sr)
	if err != nil {
		return nil, err
	}
	if !sr.Quiet {
		done, isCopy := req.takeSubmit(ctx, namedCallID(&sr))
		if isCopy {
			return noReply{}, nil // the first's answer answers it
		}
		defer done()
	}
	if sr.Wait {
		release, err := c.waits.hold(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	if !sr.Quiet {
		return c.Submit(ctx, &sr, req.Headers())
	}
	done := req.later()
	reply, pending, err := c.submitter.run(ctx, &sr, req.Headers(), func(_ *messages.SubmitReply, err error) {
		if err != nil {
			c.respondError(req, err)
		}
		done()
	})
	if pending {
		return noReply{}, nil
	}
	done() // nothing goes on after this handler
	if err == nil && reply.State == messages.StateQueued {
		return noReply{}, nil
	}
	return reply, err
}

// Submit checks a call and queues it, as calls.submit does; headers carry
// the caller's trace context.
func (c *Coordinator) Submit(ctx context.Context, sr *messages.SubmitRequest, headers map[string][]string) (*messages.SubmitReply, error) {
	reply, _, err := c.submitter.run(ctx, sr, headers, nil)
	return reply, err
}

// requestTimeout bounds the work of a request that does not wait for a result.
const requestTimeout = 30 * time.Second

// serve runs each request on a goroutine of its own (reused from earlier
// requests), so that a slow request never holds up the ones behind it; at
// most MaxConcurrentRequests run at once.
func (c *Coordinator) serve(endpoint string, h handlerFunc) micro.Handler {
	return micro.HandlerFunc(func(mr micro.Request) {
		// The receipt says this process has the request, before it waits
		// for a place among the requests it serves: a coordinator that is
		// only busy is not taken for a hung one and sent copies.
		if to := mr.Headers().Get(messages.HeaderReceipt); to != "" {
			c.receipt(mr, to)
		}
		c.sem <- struct{}{}
		c.inflight.Add(1)
		c.handlers.Go(func() {
			c.handle(endpoint, h, mr, func() {
				<-c.sem
				c.inflight.Done()
			})
		})
	})
}

// handle answers one request. release is called once the request is done
// with, which may be after handle returns (see request.later).
func (c *Coordinator) handle(endpoint string, h handlerFunc, mr micro.Request, release func()) {
	req := &request{Request: mr, endpoint: endpoint, release: release, guard: c.guard, inHand: &c.inHand}
	req.holds.Store(1)
	defer req.done()
	codec, version, err := messages.RequestCodec(messages.Header(mr.Headers()), versionsOf(endpoint)...)
	req.codec, req.version = codec, version
	if err == nil && len(mr.Data()) > c.cfg.MaxRequestBytes {
		err = messages.Errorf(messages.CodePayloadTooLarge, "request is %d bytes; at most %d", len(mr.Data()), c.cfg.MaxRequestBytes)
	}
	var reply any
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout+c.cfg.MaxWait)
		reply, err = h(ctx, req)
		cancel()
	}
	if err != nil {
		c.respondError(req, err)
		return
	}
	if _, quiet := reply.(noReply); quiet {
		return
	}
	data, err := codec.Marshal(reply)
	if err != nil {
		c.respondError(req, messages.Errorf(messages.CodeInternal, "encode reply: %v", err))
		return
	}
	c.reply(req, &nats.Msg{Header: nats.Header(codec.ReplyHeader(version)), Data: data})
}

// receipt tells the requester that this coordinator has its request
// (messages.HeaderReceipt), on the route subject it named if the
// requester's user may receive it.
func (c *Coordinator) receipt(mr micro.Request, to string) {
	callID, ok := c.names.Routes().ParseCallSubject(to)
	if !ok {
		return
	}
	headers := map[string][]string(mr.Headers())
	if g := c.guard; g != nil {
		if caller := callerOf(headers); g.ids != nil || caller != nil {
			id, err := g.identify(caller)
			if err != nil || !slices.Contains(id.user.Routes, callID[:messages.RouteLength]) {
				return
			}
		}
	}
	h := nats.Header{}
	h.Set(messages.HeaderReceipt, messages.ReceiptSent)
	h.Set(messages.HeaderVersion, messages.ProtocolVersion)
	// The receipt is one of the request's answers on a route: it carries
	// the request's token, as they do (see reply).
	if token := mr.Headers().Get(messages.HeaderReplyToken); messages.ValidReplyToken(token) {
		h.Set(messages.HeaderReplyToken, token)
	}
	if err := c.nc.PublishMsg(&nats.Msg{Subject: to, Header: h}); err != nil {
		c.log.Warn("receipt not sent", "error", err)
	}
}

// noReply is what a handler returns when it answers nothing: a quiet
// submit whose call was queued.
type noReply struct{}

// reply sends a reply itself rather than through micro's Request, which
// expects to be answered before its handler returns: these handlers
// answer from their own goroutine. Errors carry micro's headers, so
// clients see no difference; micro's statistics do not count them.
func (c *Coordinator) reply(req *request, msg *nats.Msg) {
	if req.Reply() == "" {
		return // a request without a reply subject asked for nothing back
	}
	msg.Subject = req.Reply()
	// The server lets a requester name any reply subject its user may
	// publish to, another user's route included; the token the request
	// carries is what tells its reader that this answer is its own.
	if token := req.Headers().Get(messages.HeaderReplyToken); messages.ValidReplyToken(token) {
		if msg.Header == nil {
			msg.Header = nats.Header{}
		}
		msg.Header.Set(messages.HeaderReplyToken, token)
	}
	err := c.nc.PublishMsg(msg)
	if errors.Is(err, nats.ErrMaxPayload) && msg.Header.Get(micro.ErrorCodeHeader) == "" {
		// Unanswered, the requester would wait out its timeout and never
		// know why: it hears the reply's size instead.
		c.respondError(req, messages.Errorf(messages.CodePayloadTooLarge,
			"the reply to %s is %d bytes, more than the %d a message may carry: ask for less (a smaller limit or max), or in %s if the reply is in JSON",
			req.endpoint, len(msg.Data), c.nc.MaxPayload(), messages.ContentTypeMsgpack))
		return
	}
	if err != nil {
		c.log.Warn("reply not sent", "endpoint", req.endpoint, "error", err)
	}
}

func (c *Coordinator) respondError(req *request, err error) {
	e := messages.AsError(err)
	metrics.RequestError(req.endpoint, string(e.Code))
	if e.Code == messages.CodeInternal {
		c.log.Error("request failed", "endpoint", req.endpoint, "error", err)
	}
	body, merr := req.codec.Marshal(e)
	if merr != nil {
		body = nil
	}
	version := req.version
	if version == "" {
		version = messages.ProtocolVersion
	}
	h := nats.Header(req.codec.ReplyHeader(version))
	h.Set(micro.ErrorHeader, e.Error())
	h.Set(micro.ErrorCodeHeader, e.Code.StatusText())
	c.reply(req, &nats.Msg{Header: h, Data: body})
}

// newMsg builds a message in the contract's default encoding.
func newMsg(subject string, v any) (*nats.Msg, error) {
	data, err := messages.Msgpack.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: subject, Header: nats.Header(messages.Msgpack.NewHeader()), Data: data}, nil
}
