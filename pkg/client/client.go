// Package client is the Go SDK for agents: list tools, submit calls, wait
// for and watch their results, cancel them, and resume turns.
//
// Failed requests return a *messages.Error: match it by code with
// errors.Is (messages.ErrToolNotFound, messages.ErrNoResponders when no
// coordinator answers, …), never by its message.
//
// Requests go to the coordinator service; watching a call reads its events
// straight from JetStream, so a watch continues across coordinator restarts
// and replays a call's events from the start after a reconnect.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Options configure a client.
type Options struct {
	// Prefix of subjects and resources. Defaults to "toolbus".
	Prefix string
	// Agent is sent with every call unless the call names one.
	Agent string
	// Codec of requests. Defaults to MessagePack.
	Codec messages.Codec
	// RequestTimeout bounds a request when its context has no deadline. Defaults to 30s.
	RequestTimeout time.Duration
}

// Client talks to Toolbus over a NATS connection.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	inbox  *ledger.Inbox
	routes *ledger.Routes
	opts   Options
	names  messages.Names
	ledger *ledger.Ledger
}

// New returns a client on the connection.
func New(nc *nats.Conn, opts Options) (*Client, error) {
	names, err := messages.NewNames(opts.Prefix)
	if err != nil {
		return nil, err
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	return &Client{nc: nc, js: js, inbox: ledger.NewInbox(nc), routes: ledger.NewRoutes(nc, names), opts: opts, names: names, ledger: ledger.New(nc, js, names)}, nil
}

// Close releases the client's subscriptions; the connection stays open.
func (c *Client) Close() {
	c.inbox.Close()
	c.routes.Close()
	c.ledger.Close()
}

// request sends one API request and decodes the reply into out. Error
// replies come back as *messages.Error, so errors.Is(err,
// messages.ErrToolNotFound) and the like work; a request that no
// coordinator received fails with messages.ErrNoResponders.
func (c *Client) request(ctx context.Context, endpoint string, in, out any) error {
	subject, err := c.names.APISubject(endpoint)
	if err != nil {
		return err
	}
	data, err := c.opts.Codec.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	msg := &nats.Msg{Subject: subject, Header: nats.Header(c.opts.Codec.NewHeader()), Data: data}
	tracing.Inject(ctx, msg.Header)
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return noCoordinator(subject)
		}
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	return decodeReply(endpoint, reply, out)
}

// noCoordinator is the error of a request that no coordinator received.
func noCoordinator(subject string) error {
	return messages.Errorf(messages.CodeNoResponders, "no coordinator answers on %s", subject)
}

// decodeReply decodes a reply into out, or returns the error it carries
// as *messages.Error. The error's code is the one in the reply's body; the
// HTTP-style status in the Nats-Service-Error-Code header stands for
// several codes, so a reply without a readable body is reported by the
// code that covers all of its status, or as internal.
func decodeReply(endpoint string, reply *nats.Msg, out any) error {
	if status := reply.Header.Get(micro.ErrorCodeHeader); status != "" {
		var e messages.Error
		if len(reply.Data) > 0 {
			if _, derr := messages.Decode(messages.Header(reply.Header), reply.Data, &e); derr == nil && e.Code != "" {
				return &e
			}
		}
		return &messages.Error{Code: codeForStatus(status), Message: fmt.Sprintf("%s failed with status %s: %s", endpoint, status, reply.Header.Get(micro.ErrorHeader))}
	}
	if out == nil {
		return nil
	}
	if _, err := messages.Decode(messages.Header(reply.Header), reply.Data, out); err != nil {
		return fmt.Errorf("decode %s reply: %w", endpoint, err)
	}
	return nil
}

// codeForStatus returns the code that covers every code of an error
// status, for a reply that carries no code of its own: bad_request for
// 400, unavailable for 503, and internal for any other status, since no
// code covers, say, every kind of 404.
func codeForStatus(status string) messages.ErrorCode {
	switch status {
	case messages.CodeBadRequest.StatusText():
		return messages.CodeBadRequest
	case messages.CodeUnavailable.StatusText():
		return messages.CodeUnavailable
	}
	return messages.CodeInternal
}

// ListTools lists the catalog.
func (c *Client) ListTools(ctx context.Context, req messages.ListToolsRequest) (*messages.ListToolsReply, error) {
	if req.Agent == "" {
		req.Agent = c.opts.Agent
	}
	var out messages.ListToolsReply
	return &out, c.request(ctx, messages.EndpointToolsList, &req, &out)
}

// Submit queues a call and returns at once, or, with req.Wait, when the
// result is there or the wait is over.
func (c *Client) Submit(ctx context.Context, req messages.SubmitRequest) (*messages.SubmitReply, error) {
	if req.Agent == "" {
		req.Agent = c.opts.Agent
	}
	var out messages.SubmitReply
	return &out, c.request(ctx, messages.EndpointCallsSubmit, &req, &out)
}

// CallOption adjusts a call made with Call.
type CallOption func(*messages.SubmitRequest)

// WithTurn files the call under an agent turn.
func WithTurn(turn string) CallOption { return func(r *messages.SubmitRequest) { r.Turn = turn } }

// WithTimeout sets the call's deadline.
func WithTimeout(d time.Duration) CallOption {
	return func(r *messages.SubmitRequest) { r.TimeoutMS = d.Milliseconds() }
}

// WithIdempotencyKey replaces the key Call generates.
func WithIdempotencyKey(key string) CallOption {
	return func(r *messages.SubmitRequest) { r.IdempotencyKey = key }
}

// WithAgent names the agent making the call.
func WithAgent(agent string) CallOption { return func(r *messages.SubmitRequest) { r.Agent = agent } }

// Call runs a tool and returns its result. args is anything that encodes
// to a JSON object (or messages.JSON). The result comes on the client's
// route, one subscription for all its calls (an idempotent call's on its
// own inbox, as its ID comes from its key), with the events stream asked
// now and then in case the copy was missed, so waiting costs the server no
// consumer and no subscription per call. A submit that found no
// coordinator is retried; one that timed out is retried only with an
// idempotency key, which guarantees the tool runs once.
func (c *Client) Call(ctx context.Context, tool string, args any, opts ...CallOption) (*messages.CallResult, error) {
	raw, err := toJSON(args)
	if err != nil {
		return nil, err
	}
	req := messages.SubmitRequest{Tool: tool, Arguments: raw, Agent: c.opts.Agent}
	for _, opt := range opts {
		opt(&req)
	}
	if req.IdempotencyKey == "" {
		return c.callOnRoute(ctx, req)
	}
	notify, results, done, err := c.inbox.Register(1)
	if err != nil {
		return nil, err
	}
	defer done()
	req.Notify = notify
	reply, err := c.submitRetrying(ctx, req)
	if err != nil {
		return nil, err
	}
	if res, settled, err := settle(reply); settled {
		return res, err
	}
	return c.ledger.WaitOn(ctx, reply.CallID, results)
}

// callOnRoute makes a call on the client's route with an ID chosen here,
// so that its result is awaited before anything is sent. The submit is
// quiet: the coordinator answers, on the same route, only if the call is
// not queued (a refusal, an approval to obtain). If neither an answer nor
// the result has come after ResultCheckInterval, the events stream is asked
// whether the call exists; if it does not, the submit is sent again as a
// request with a reply, which queues the call once whatever became of the
// first (the calls stream drops a second message with the same ID).
func (c *Client) callOnRoute(ctx context.Context, req messages.SubmitRequest) (*messages.CallResult, error) {
	route, err := c.routes.Route()
	if err != nil {
		return nil, err
	}
	req.Route, req.CallID, req.Quiet = route, messages.RoutedCallID(route, nuid.Next()), true
	callID := req.CallID
	answers, done := c.routes.Await(callID)
	defer func() { done() }()
	// A coordinator from before quiet submits names the call itself, and
	// answers; the call is then followed under that name.
	adopt := func(reply *messages.SubmitReply) {
		if reply.CallID != "" && reply.CallID != callID {
			done()
			callID = reply.CallID
			answers, done = c.routes.Await(callID)
		}
	}
	submitted := time.Now()
	if err := c.submitQuietly(ctx, req); err != nil {
		return nil, err
	}
	confirmed := false
	for attempt := 0; ; {
		select {
		case msg := <-answers:
			if ledger.IsStoredEvent(msg) {
				var ev messages.CallEvent
				if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &ev); err == nil && ev.Result != nil {
					return ev.Result, nil
				}
				break
			}
			var reply messages.SubmitReply
			err := decodeAnswer(msg, &reply)
			if isNoCoordinator(err) && attempt < 4 {
				if err := ledger.Sleep(ctx, retryDelay(attempt)); err != nil {
					return nil, err
				}
				attempt++
				if err := c.submitQuietly(ctx, req); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			if res, settled, err := settle(&reply); settled {
				return res, err
			}
			adopt(&reply)
			confirmed = true
		case <-c.routes.Check():
			if confirmed {
				if ev, err := c.ledger.Last(ctx, callID, messages.EventResult); err == nil && ev != nil && ev.Result != nil {
					return ev.Result, nil
				}
				break
			}
			snap, err := c.ledger.Snapshot(ctx, callID)
			if err != nil {
				break // asked again at the next check
			}
			if snap.Result != nil && snap.Result.Result != nil {
				return snap.Result.Result, nil
			}
			if !snap.Exists() {
				if time.Since(submitted) < ledger.ResultCheckInterval {
					break // the coordinator may still be at it
				}
				loud := req
				loud.Quiet = false
				reply, err := c.submitRetrying(ctx, loud)
				if err != nil {
					return nil, err
				}
				if res, settled, err := settle(reply); settled {
					return res, err
				}
				adopt(reply)
			}
			confirmed = true
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for call %s: %w", callID, ctx.Err())
		}
	}
}

// submitQuietly publishes a quiet submit whose answers, if any, come on
// the call's route.
func (c *Client) submitQuietly(ctx context.Context, req messages.SubmitRequest) error {
	subject, err := c.names.APISubject(messages.EndpointCallsSubmit)
	if err != nil {
		return err
	}
	reply, err := c.names.CallRouteSubject(req.CallID)
	if err != nil {
		return err
	}
	data, err := c.opts.Codec.Marshal(&req)
	if err != nil {
		return fmt.Errorf("encode submit: %w", err)
	}
	msg := &nats.Msg{Subject: subject, Reply: reply, Header: nats.Header(c.opts.Codec.NewHeader()), Data: data}
	tracing.Inject(ctx, msg.Header)
	if err := c.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	return nil
}

// decodeAnswer reads the coordinator's answer to a quiet submit, or the
// server's status when no coordinator listens.
func decodeAnswer(msg *nats.Msg, out *messages.SubmitReply) error {
	if len(msg.Data) == 0 && msg.Header.Get("Status") == noRespondersStatus {
		return noCoordinator(msg.Subject)
	}
	return decodeReply(messages.EndpointCallsSubmit, msg, out)
}

// noRespondersStatus is the status of the message the server sends to a
// request's reply subject when nothing listens on its subject.
const noRespondersStatus = "503"

func isNoCoordinator(err error) bool { return errors.Is(err, messages.ErrNoResponders) }

// submitRetrying submits, retrying errors that cannot have queued the call twice.
func (c *Client) submitRetrying(ctx context.Context, req messages.SubmitRequest) (*messages.SubmitReply, error) {
	for attempt := 0; ; attempt++ {
		reply, err := c.Submit(ctx, req)
		if err == nil {
			return reply, nil
		}
		if ctx.Err() != nil || attempt >= 4 || !c.retryable(err, req.IdempotencyKey != "") {
			return nil, err
		}
		if err := ledger.Sleep(ctx, retryDelay(attempt)); err != nil {
			return nil, err
		}
	}
}

func retryDelay(attempt int) time.Duration { return time.Duration(100<<attempt) * time.Millisecond }

// settle reports whether a submit's reply ends the call: it carries the
// result, or the call waits for an approval its agent is to obtain.
func settle(reply *messages.SubmitReply) (*messages.CallResult, bool, error) {
	if reply.Result != nil {
		return reply.Result, true, nil
	}
	if reply.State == messages.StateAwaitingApproval && reply.Approval != nil && reply.Approval.Mode == messages.ApprovalPrompt {
		return nil, true, &ApprovalRequiredError{CallID: reply.CallID, Approval: reply.Approval}
	}
	return nil, false, nil
}

// ApprovalRequiredError is returned by Call when the call waits for an
// approval that the agent is to obtain from its user (mode prompt): ask the
// user, send the answer with Decide, then Wait for the call's result.
type ApprovalRequiredError struct {
	CallID   string
	Approval *messages.Approval
}

func (e *ApprovalRequiredError) Error() string {
	return fmt.Sprintf("call %s of %s needs the user's approval: %s", e.CallID, e.Approval.Tool, e.Approval.Reason)
}

// ListApprovals lists approvals; State defaults to pending.
func (c *Client) ListApprovals(ctx context.Context, req messages.ListApprovalsRequest) (*messages.ListApprovalsReply, error) {
	var out messages.ListApprovalsReply
	return &out, c.request(ctx, messages.EndpointApprovalsList, &req, &out)
}

// Decide approves or denies an approval.
func (c *Client) Decide(ctx context.Context, req messages.DecideRequest) (*messages.DecideReply, error) {
	if req.By == "" {
		req.By = c.opts.Agent
	}
	var out messages.DecideReply
	return &out, c.request(ctx, messages.EndpointApprovalsDecide, &req, &out)
}

// Answer passes on the user's answer to an approval in prompt mode (see
// ApprovalRequiredError). Approvals in queue mode are for operators, who use Decide.
func (c *Client) Answer(ctx context.Context, req messages.DecideRequest) (*messages.DecideReply, error) {
	if req.By == "" {
		req.By = c.opts.Agent
	}
	var out messages.DecideReply
	return &out, c.request(ctx, messages.EndpointApprovalsAnswer, &req, &out)
}

// SetToolEnabled disables (with a reason) or enables a tool ("ns-method")
// or, when tool names no method, a namespace.
func (c *Client) SetToolEnabled(ctx context.Context, toolOrNamespace string, enabled bool, reason string) error {
	req := messages.ToolSwitchRequest{Reason: reason, By: c.opts.Agent}
	if messages.ValidateNamespace(toolOrNamespace) == nil {
		req.Namespace = toolOrNamespace
	} else {
		req.Tool = toolOrNamespace
	}
	endpoint := messages.EndpointToolsDisable
	if enabled {
		endpoint = messages.EndpointToolsEnable
	}
	return c.request(ctx, endpoint, &req, nil)
}

// retryable reports whether a failed submit may be sent again: always when
// no coordinator received it, and after a timeout only when an idempotency
// key makes the retry harmless.
func (c *Client) retryable(err error, idempotent bool) bool {
	var e *messages.Error
	if errors.As(err, &e) {
		return e.Code == messages.CodeNoResponders || idempotent && e.Code == messages.CodeUnavailable
	}
	return idempotent && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout))
}

func toJSON(v any) (messages.JSON, error) {
	switch a := v.(type) {
	case nil:
		return nil, nil
	case messages.JSON:
		return a, nil
	case json.RawMessage:
		return messages.JSON(a), nil
	case []byte:
		return messages.JSON(a), nil
	case string:
		return messages.JSON(a), nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode arguments: %w", err)
	}
	return data, nil
}

// Get returns a call's state and, once it ended, its result.
func (c *Client) Get(ctx context.Context, callID string) (*messages.CallInfo, error) {
	var out messages.CallInfo
	return &out, c.request(ctx, messages.EndpointCallsGet, &messages.GetCallRequest{CallID: callID}, &out)
}

// Cancel asks to cancel a call.
func (c *Client) Cancel(ctx context.Context, callID, reason string) (*messages.CancelReply, error) {
	var out messages.CancelReply
	return &out, c.request(ctx, messages.EndpointCallsCancel, &messages.CancelRequest{CallID: callID, Reason: reason, By: c.opts.Agent}, &out)
}

// Discover searches the tools the agent may use. With a turn, the page's
// tools become visible to the model on the turn's next iterations.
func (c *Client) Discover(ctx context.Context, req messages.DiscoverRequest) (*messages.DiscoverReply, error) {
	if req.Agent == "" {
		req.Agent = c.opts.Agent
	}
	var out messages.DiscoverReply
	return &out, c.request(ctx, messages.EndpointToolsDiscover, &req, &out)
}

// Activate makes tools visible to the model for the rest of a turn.
func (c *Client) Activate(ctx context.Context, turn string, tools ...string) (*messages.ActivateReply, error) {
	var out messages.ActivateReply
	return &out, c.request(ctx, messages.EndpointToolsActivate, &messages.ActivateRequest{Agent: c.opts.Agent, Turn: turn, Tools: tools}, &out)
}

// Turn returns a turn's calls with their states and results.
func (c *Client) Turn(ctx context.Context, turn string) (*messages.TurnInfo, error) {
	var out messages.TurnInfo
	return &out, c.request(ctx, messages.EndpointTurnsGet, &messages.GetTurnRequest{Turn: turn}, &out)
}

// Watch yields a call's events from the first, then live ones, and ends
// after the result. It reads JetStream directly and survives coordinator
// restarts; after an error it can simply be started again.
func (c *Client) Watch(ctx context.Context, callID string) iter.Seq2[*messages.CallEvent, error] {
	return func(yield func(*messages.CallEvent, error) bool) {
		for ev, err := range c.ledger.Watch(ctx, callID) {
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(&ev.CallEvent, nil) {
				return
			}
		}
	}
}

// FullResult reads the whole result of a call whose result was truncated
// (Truncated, with FullResult naming where it is kept).
func (c *Client) FullResult(ctx context.Context, ref *messages.ObjectRef) (*messages.CallResult, error) {
	if ref == nil {
		return nil, errors.New("the result was not truncated")
	}
	obj, err := c.js.ObjectStore(ctx, ref.Bucket)
	if err != nil {
		return nil, fmt.Errorf("results store %s: %w", ref.Bucket, err)
	}
	data, err := obj.GetBytes(ctx, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("result %s: %w", ref.Name, err)
	}
	var res messages.CallResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("result %s: %w", ref.Name, err)
	}
	return &res, nil
}

// Wait returns the call's result once it is there. Unlike Watch it holds
// no consumer on the server, so any number of calls can be awaited at once.
func (c *Client) Wait(ctx context.Context, callID string) (*messages.CallResult, error) {
	if err := messages.ValidateID("call ID", callID); err != nil {
		return nil, err
	}
	return c.ledger.AwaitResult(ctx, callID)
}
