// Package client is the Go SDK for agents: list tools, submit calls, wait
// for and watch their results, cancel them, and resume turns.
//
// Failed requests return a *messages.Error: match it by code with
// errors.Is (messages.ErrToolNotFound, messages.ErrNoResponders when no
// coordinator answers, …), never by its message.
//
// Requests go to the coordinator service; watching a call reads its events
// straight from JetStream, so a watch continues across coordinator restarts
// and replays a call's events from the start after a reconnect. A client
// whose account has no JetStream — an agent's user of an installation with
// identities, which may read only its own agents' calls — sets
// Options.CoordinatorReads and its user's Options.Route, and connects with
// its user's inbox prefix: it then waits and watches through the
// coordinator (calls.get with wait_ms, calls.events).
//
// # Timeouts and retries
//
// Every request is made in attempts, each bounded by
// Options.RequestTimeout (5s by default) whatever the deadline of its
// context, so that a request sent to a coordinator that does not answer
// (a hung process, or one cut off from JetStream) is not waited for until
// the caller's deadline: the next attempt goes to the coordinators' queue
// group again, and so, most of the time, to another coordinator. A submit
// with wait gets its wait on top of the bound (wait_ms, or else its
// timeout_ms and a second, or else Options.MaxWait). Between attempts the
// client pauses from 100ms, doubling up to 1s, each pause drawn between
// half of it and all of it. The caller's context bounds the whole; a
// context without a deadline gets Options.DefaultTimeout (30s).
//
// Which failures are retried depends on whether the request is safe to
// make twice:
//
//   - no_responders (no coordinator listens, so nothing received the
//     request): a request that is safe to repeat, a submit that names its
//     call above all, for up to Options.NoCoordinatorWait (30s) within its
//     context; any other request up to six attempts, then the error is
//     returned.
//   - no answer within the attempt's bound, and the coordinator's
//     unavailable and timeout: reads (ListTools, Get, Turn, Discover,
//     ListApprovals) and idempotent requests (Cancel, Activate,
//     Operator's SetToolEnabled, every Submit, which names its call by an idempotency
//     key or its own call ID) are made again while the context allows. Any
//     other request (Operator's Decide, Answer) is not: its attempt gets
//     Options.CoordinatorWait (10s) on top of the bound, the time a
//     coordinator may wait out a stream's election before it answers, and
//     an attempt that went unanswered even so fails with code timeout
//     (messages.ErrTimeout), which says that its outcome is unknown.
//
// Within an attempt, a request that is safe to repeat is copied while no
// answer has come after its hedge delay (three times the recent time to an
// answer or a receipt, at least Options.HedgeAfter, 250ms, at most 2s): two
// copies, then four after HedgeAfter, then one after a wait that doubles
// each time up to 2s, each to a coordinator the queue group picks, until a
// coordinator's receipt says it has the request; so a hung coordinator
// among several costs a request about a quarter of a second, and
// coordinators behind on their requests are not sent a copy of each
// waiting request every HedgeAfter. A request that changes something is
// copied only while no coordinator has sent a receipt for it.
// A request whose connection was lost is sent again when it is back.
// Reads that cost the coordinator a scan (ListCalls, Operator's
// ListAudit and CallStats) ask for a receipt from their first copy, so that they are
// copied only when no coordinator has taken them, and each of their
// attempts gets 25s more.
//
// A refusal means nothing was queued: a Submit that failed without a
// coordinator deciding looks its call up before it reports the failure,
// and Call reports a refusal only when the call does not exist.
//
// Call is idempotent by construction: it names its call's ID on the
// client's route (or, with WithIdempotencyKey, its ID comes from the key),
// and follows it until its result or its context's end. It waits for the
// result for as long as its context allows, not for RequestTimeout: a call
// lasts as long as its tool takes, and ends with the call's own deadline.
//
// # Operators
//
// Client is an agent's API. An operator's requests — deciding approvals
// (Decide), switching tools on and off (SetToolEnabled) and removing stale
// ones (RemoveTools), the audit log (ListAudit), the live workers
// (ListWorkers), the statistics of the last hour (CallStats), how the
// policy decides a call (ExplainPolicy), and what discovery learned from
// use (LearningStatus, SetLearning, ResetLearning) — are methods of the
// *Operator that Client.Operator returns, which sends them on the client's
// connection with the same attempts and retries. Until this version they
// were methods of Client itself: c.Decide(ctx, req) is now
// c.Operator().Decide(ctx, req), and so on. Only the Go API moved: every
// request and reply on the wire is as it was (docs/protocol.md), and
// clients in other languages see nothing new.
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

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/transport"
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
	// RequestTimeout bounds each attempt of a request, whatever the
	// deadline of its context (see the package doc); a submit with wait
	// gets its wait on top. Defaults to 5s.
	RequestTimeout time.Duration
	// DefaultTimeout bounds a request, all its attempts, when its context
	// has no deadline. It does not bound Call's or Wait's wait for a
	// result. Defaults to 30s.
	DefaultTimeout time.Duration
	// CoordinatorWait is how long a coordinator may wait for JetStream
	// before it answers (in a cluster, while a stream elects a leader: the
	// coordinator's UnavailableWait). An attempt of a request that cannot
	// be sent twice gets it on top of RequestTimeout, so that a coordinator
	// waiting out an election is not given up on as a hung one: giving up
	// could only turn its answer into an unknown outcome. Defaults to 10s.
	CoordinatorWait time.Duration
	// MaxWait is the longest a coordinator holds the reply of a submit
	// with wait that sets neither wait_ms nor timeout_ms (the
	// coordinator's own MaxWait). Defaults to 5m.
	MaxWait time.Duration
	// CoordinatorReads follows calls through the coordinator's API
	// (calls.get with wait_ms, calls.events) rather than from the events
	// stream, for a connection whose account has no JetStream: an agent's
	// user of an installation with identities. Watch switches to it by
	// itself when the server says the account has no JetStream; Wait and
	// Call do not find out, so set it for such a connection. Its
	// connection names the user's own inbox prefix
	// (nats.CustomInboxPrefix("_INBOX_<user>")).
	CoordinatorReads bool
	// HedgeAfter is how long a read or a request that is safe to repeat
	// goes unanswered before a copy of it is sent, which the coordinators'
	// queue group may give to another coordinator, and how long Call waits
	// before it looks up a call it submitted quietly (see the package
	// doc). A coordinator that does not answer (stopped, hung) then delays
	// a call by about this much. Defaults to 250ms.
	HedgeAfter time.Duration
	// NoCoordinatorWait is how long a request that is safe to repeat, a
	// submit that names its call above all, is sent again while no
	// coordinator listens (a node of the cluster restarting, the
	// coordinators reconnecting), within its context; other requests give
	// up after six attempts. Defaults to 30s.
	NoCoordinatorWait time.Duration
	// Route is the route the client's calls are made on (see
	// messages.RouteNames.Subject): with identities, one of the routes the
	// identities file gives its user, whose results the server lets it
	// receive. Defaults to a new route of the client's own.
	Route string
}

// Client talks to Toolbus over a NATS connection: an agent's calls and
// turns on it, and, through Operator, an operator's API.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	inbox  *ledger.Inbox
	routes *ledger.Routes
	opts   Options
	names  messages.Names
	ledger *ledger.Ledger
	// api sends every request to the coordinators.
	api *coordinatorAPI
	// reads follows calls: from JetStream, or through the coordinator.
	reads    *callReads
	watcher  *ledger.Watcher
	operator *Operator
}

// New returns a client on the connection.
func New(nc *nats.Conn, opts Options) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client: a NATS connection is required")
	}
	names, err := messages.NewNames(opts.Prefix)
	if err != nil {
		return nil, err
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 30 * time.Second
	}
	if opts.CoordinatorWait <= 0 {
		opts.CoordinatorWait = 10 * time.Second
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 5 * time.Minute
	}
	if opts.HedgeAfter <= 0 {
		opts.HedgeAfter = 250 * time.Millisecond
	}
	if opts.NoCoordinatorWait <= 0 {
		opts.NoCoordinatorWait = 30 * time.Second
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	routes := ledger.NewRoutes(nc, names)
	if opts.Route != "" {
		if routes, err = ledger.NewRoutesOn(nc, names, opts.Route); err != nil {
			return nil, err
		}
	}
	c := &Client{nc: nc, js: js, inbox: ledger.NewInbox(nc), routes: routes, opts: opts, names: names, ledger: ledger.New(nc, js, names), watcher: ledger.NewWatcher(js, names)}
	c.api = &coordinatorAPI{nc: nc, inbox: c.inbox, routes: routes, opts: opts, names: names}
	c.reads = &callReads{api: c.api, ledger: c.ledger, js: js}
	c.operator = &Operator{api: c.api}
	return c, nil
}

// Close releases the client's subscriptions; the connection stays open.
func (c *Client) Close() {
	c.inbox.Close()
	c.routes.Close()
	c.ledger.Close()
}

// ListTools lists the catalog.
func (c *Client) ListTools(ctx context.Context, req messages.ListToolsRequest) (*messages.ListToolsReply, error) {
	if req.Agent == "" {
		req.Agent = c.opts.Agent
	}
	var out messages.ListToolsReply
	return &out, c.api.request(ctx, messages.EndpointToolsList, &req, &out, read, 0)
}

// Submit queues a call and returns at once, or, with req.Wait, when the
// result is there or the wait is over. Unless req names an idempotency key
// or a call ID, Submit names the call's ID itself, on req.Route or else on
// the client's route (with CoordinatorReads and no Options.Route, by an
// idempotency key of its own instead: such a user receives only the routes
// it was given), so that every submit can be sent again after an attempt
// that went unanswered without running the call twice.
func (c *Client) Submit(ctx context.Context, req messages.SubmitRequest) (*messages.SubmitReply, error) {
	if err := ctx.Err(); err != nil {
		// Nothing is sent: a caller that gave up before the call was made
		// is not left with a call it was told failed.
		return nil, fmt.Errorf("submit %s: not sent: %w", req.Tool, err)
	}
	if req.Agent == "" {
		req.Agent = c.opts.Agent
	}
	if req.IdempotencyKey == "" && req.CallID == "" {
		// A call named here can be submitted again without running twice,
		// so a submit that went unanswered is sent again rather than
		// reported with its outcome unknown. Its ID goes on the request's
		// route, as the coordinator's would, or on the client's; a client
		// that reads through the coordinator and was given no route (its
		// user may receive none of its own making) names it by a key, as
		// Call does.
		route := req.Route
		switch {
		case route == "" && c.opts.Route == "" && c.api.readsViaCoordinator():
			req.IdempotencyKey = messages.RandomToken()
		case route == "":
			route, _ = c.routes.Route()
		}
		if route != "" {
			req.Route, req.CallID = route, messages.RoutedCallID(route, messages.RandomToken())
		}
	}
	safe := once
	if req.IdempotencyKey != "" || req.CallID != "" {
		safe = repeatable
	}
	var out messages.SubmitReply
	err := c.api.request(ctx, messages.EndpointCallsSubmit, &req, &out, safe, c.opts.submitWait(&req))
	if err != nil && safe == repeatable && undecided(err) {
		// An attempt that went unanswered, or whose coordinator could not
		// store the call for now, may have queued it all the same: the
		// call is looked up before anything is reported.
		callID := req.CallID
		if callID == "" {
			callID = messages.IdempotentCallID(req.Agent, req.IdempotencyKey)
		}
		if ctx.Err() == nil {
			lctx, cancel := context.WithTimeout(ctx, ledger.ResultCheckInterval)
			reply, exists, lerr := c.reads.lookupCall(lctx, toolNamespace(req.Tool), callID)
			cancel()
			if lerr == nil && exists {
				return reply, nil
			}
		}
		return &out, fmt.Errorf("submit call %s (calls.get tells whether it was queued): %w", callID, err)
	}
	return &out, err
}

// undecided reports a failed request whose outcome no coordinator
// decided: none answered, or one could not reach JetStream in time, or
// the caller's context ended while it waited.
func undecided(err error) bool {
	return mayPass(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// submitWait is how long the coordinator may hold the reply of a submit: its
// wait_ms, or else its timeout_ms and the second the coordinator adds, or
// else the coordinator's longest wait.
func (o *Options) submitWait(req *messages.SubmitRequest) time.Duration {
	switch {
	case !req.Wait:
		return 0
	case req.WaitMS > 0:
		return time.Duration(req.WaitMS) * time.Millisecond
	case req.TimeoutMS > 0:
		return time.Duration(req.TimeoutMS)*time.Millisecond + time.Second
	}
	return o.MaxWait
}

// CallOption adjusts a call made with Call.
type CallOption func(*messages.SubmitRequest)

// WithTurn files the call under an agent turn.
func WithTurn(turn string) CallOption { return func(r *messages.SubmitRequest) { r.Turn = turn } }

// WithTimeout sets the call's deadline. The wire counts it in
// milliseconds: a positive d under a millisecond is sent as one, not as 0,
// which would ask for the coordinator's default.
func WithTimeout(d time.Duration) CallOption {
	return func(r *messages.SubmitRequest) {
		r.TimeoutMS = d.Milliseconds()
		if d > 0 && r.TimeoutMS == 0 {
			r.TimeoutMS = 1
		}
	}
}

// WithIdempotencyKey replaces the key Call generates.
func WithIdempotencyKey(key string) CallOption {
	return func(r *messages.SubmitRequest) { r.IdempotencyKey = key }
}

// WithAgent names the agent making the call.
func WithAgent(agent string) CallOption { return func(r *messages.SubmitRequest) { r.Agent = agent } }

// Call runs a tool and returns its result. args is anything that encodes
// to a JSON object; a string, []byte, json.RawMessage or messages.JSON is
// taken as the JSON text itself. A ctx already ended sends nothing; one
// that ends while Call waits ends the wait, not the call, which goes on to
// its result (Cancel cancels it; Wait awaits it again). The result comes on the client's
// route, one subscription for all its calls (an idempotent call's on its
// own inbox, as its ID comes from its key), with the events stream asked
// now and then in case the copy was missed, so waiting costs the server no
// consumer and no subscription per call. A submit that found no
// coordinator, or went unanswered, is sent again with the same call ID (or
// key), which guarantees the call is queued once: its tool runs as its
// delivery says (docs/reliability.md), once unless a worker dies or loses
// the call while running it, when an at-least-once tool runs again and an
// at-most-once one ends outcome_unknown. The wait for the result is
// bounded by ctx only, not by RequestTimeout: the call's own deadline
// (WithTimeout, or the tool's) ends it with a result.
func (c *Client) Call(ctx context.Context, tool string, args any, opts ...CallOption) (*messages.CallResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("call %s: not sent: %w", tool, err)
	}
	raw, err := toJSON(args)
	if err != nil {
		return nil, fmt.Errorf("call %s: arguments: %w", tool, err)
	}
	req := messages.SubmitRequest{Tool: tool, Arguments: raw, Agent: c.opts.Agent}
	for _, opt := range opts {
		opt(&req)
	}
	if req.IdempotencyKey == "" && (c.opts.Route != "" || !c.api.readsViaCoordinator()) {
		return c.callOnRoute(ctx, req, nil)
	}
	if c.api.readsViaCoordinator() {
		// Without a route of its own, the call is made idempotent and
		// awaited with calls.get: notify copies stay in the coordinator's account.
		if req.IdempotencyKey == "" {
			req.IdempotencyKey = messages.RandomToken()
		}
		reply, err := c.Submit(ctx, req)
		if err != nil {
			return nil, err
		}
		if res, settled, err := settle(reply); settled {
			return res, err
		}
		return c.reads.waitViaCoordinator(ctx, reply.CallID)
	}
	notify, results, done, err := c.inbox.Register(1)
	if err != nil {
		return nil, err
	}
	defer done()
	req.Notify = notify
	reply, err := c.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	if res, settled, err := settle(reply); settled {
		return res, err
	}
	return c.ledger.WaitOn(ctx, messages.TurnBucket(req.Turn), toolNamespace(tool), reply.CallID, results)
}

// toolNamespace is the namespace of the tool a call names, the one its
// result must be written under; "" if the name does not parse, and the
// coordinator refuses the call anyway.
func toolNamespace(tool string) string {
	name, err := messages.ParseToolName(tool)
	if err != nil {
		return ""
	}
	return name.Namespace
}

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
// user, send the answer with Answer, then Wait for the call's result. A
// CallObserved call whose observer's Held says so returns it for an
// approval an operator decides (mode queue) too.
type ApprovalRequiredError struct {
	CallID   string
	Approval *messages.Approval
}

func (e *ApprovalRequiredError) Error() string {
	who := "the user's approval"
	if e.Approval.Mode != messages.ApprovalPrompt {
		who = "an operator's approval"
	}
	return fmt.Sprintf("call %s of %s needs %s: %s", e.CallID, e.Approval.Tool, who, e.Approval.Reason)
}

// ListApprovals lists approvals; State defaults to pending.
func (c *Client) ListApprovals(ctx context.Context, req messages.ListApprovalsRequest) (*messages.ListApprovalsReply, error) {
	var out messages.ListApprovalsReply
	return &out, c.api.request(ctx, messages.EndpointApprovalsList, &req, &out, read, 0)
}

// Answer passes on the user's answer to an approval in prompt mode (see
// ApprovalRequiredError). Approvals in queue mode are for operators, who use Decide.
func (c *Client) Answer(ctx context.Context, req messages.DecideRequest) (*messages.DecideReply, error) {
	if req.By == "" {
		req.By = c.opts.Agent
	}
	var out messages.DecideReply
	return &out, c.api.request(ctx, messages.EndpointApprovalsAnswer, &req, &out, once, 0)
}

func toJSON(v any) (messages.JSON, error) {
	switch a := v.(type) {
	case nil:
		return nil, nil
	case messages.JSON:
		return a, nil
	case json.RawMessage:
		return jsonText(a)
	case []byte:
		return jsonText(a)
	case string:
		return jsonText([]byte(a))
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode arguments: %w", err)
	}
	return data, nil
}

// jsonText takes arguments given as text: JSON, which is checked here so
// that the mistake of a plain string is named as such.
func jsonText(text []byte) (messages.JSON, error) {
	if len(text) == 0 {
		return nil, nil
	}
	if !json.Valid(text) {
		return nil, fmt.Errorf("a string, []byte or json.RawMessage is taken as the JSON text of the arguments, and %.40q is not JSON: pass a map or a struct, or JSON such as {\"text\": \"hello\"}", text)
	}
	return messages.JSON(text), nil
}

// Get returns a call's state and, once it ended, its result.
func (c *Client) Get(ctx context.Context, callID string) (*messages.CallInfo, error) {
	var out messages.CallInfo
	return &out, c.api.request(ctx, messages.EndpointCallsGet, &messages.GetCallRequest{CallID: callID}, &out, read, 0)
}

// Cancel asks to cancel a call.
func (c *Client) Cancel(ctx context.Context, callID, reason string) (*messages.CancelReply, error) {
	var out messages.CancelReply
	return &out, c.api.request(ctx, messages.EndpointCallsCancel, &messages.CancelRequest{CallID: callID, Reason: reason, By: c.opts.Agent}, &out, repeatable, 0)
}

// Discover searches the tools the agent may use. With a turn, the page's
// tools become visible to the model on the turn's next iterations.
func (c *Client) Discover(ctx context.Context, req messages.DiscoverRequest) (*messages.DiscoverReply, error) {
	if req.Agent == "" {
		req.Agent = c.opts.Agent
	}
	var out messages.DiscoverReply
	safe := read
	if req.Turn != "" {
		safe = repeatable // it makes the page's tools visible on the turn
	}
	return &out, c.api.request(ctx, messages.EndpointToolsDiscover, &req, &out, safe, 0)
}

// Activate makes tools visible to the model for the rest of a turn.
func (c *Client) Activate(ctx context.Context, turn string, tools ...string) (*messages.ActivateReply, error) {
	var out messages.ActivateReply
	return &out, c.api.request(ctx, messages.EndpointToolsActivate, &messages.ActivateRequest{Agent: c.opts.Agent, Turn: turn, Tools: tools}, &out, repeatable, 0)
}

// Turn returns a turn's calls with their states and results.
func (c *Client) Turn(ctx context.Context, turn string) (*messages.TurnInfo, error) {
	var out messages.TurnInfo
	return &out, c.api.request(ctx, messages.EndpointTurnsGet, &messages.GetTurnRequest{Turn: turn}, &out, read, 0)
}

// ListCalls reads a page of the execution log (calls.list), newest call
// first; pass the reply's NextCursor in the request for the next page.
func (c *Client) ListCalls(ctx context.Context, req messages.CallsListRequest) (*messages.CallsListReply, error) {
	var out messages.CallsListReply
	return &out, c.api.request(ctx, messages.EndpointCallsList, &req, &out, scan, 0)
}

// Watch yields a call's events from the first, then live ones, and ends
// after the result. It reads JetStream directly and survives coordinator
// restarts; after an error it can simply be started again. With
// Options.CoordinatorReads, or once the server said the account has no
// JetStream, it follows the call with calls.events instead. Events written
// under another namespace than the call's (the one its queued event
// names) are skipped.
//
// Each event followed through the client's own consumer costs the server
// a walk of the events stream's messages stored since the call's previous
// event (docs/BENCHMARKS.md, "Watchers of long-running calls"); through
// the coordinator it does only while the coordinator holds few waits
// (docs/reliability.md, "The event feed"). To wait for the result alone,
// use Wait, which walks nothing.
func (c *Client) Watch(ctx context.Context, callID string) iter.Seq2[*messages.CallEvent, error] {
	return func(yield func(*messages.CallEvent, error) bool) {
		if c.api.readsViaCoordinator() {
			c.reads.watchViaCoordinator(ctx, callID)(yield)
			return
		}
		if _, err := c.knownCall(ctx, callID); err != nil {
			yield(nil, fmt.Errorf("watch call %s: %w", callID, err))
			return
		}
		seen := false
		for ev, err := range c.watcher.Watch(ctx, "", callID) {
			if err != nil && !seen && isNoJetStream(err) {
				c.api.noJetStream.Store(true)
				c.reads.watchViaCoordinator(ctx, callID)(yield)
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			seen = true
			if !yield(&ev.CallEvent, nil) {
				return
			}
		}
	}
}

// FullResult reads the whole result of a call whose result was truncated
// (Truncated, with FullResult naming where it is kept). It reads the
// namespace's results store itself, or, for a client whose account has no
// JetStream (and with Options.CoordinatorReads), pages through
// calls.full_result, which answers only for the calls of the agents the
// client's user may act as. The pages are checked against the result's
// size and digest.
func (c *Client) FullResult(ctx context.Context, ref *messages.ObjectRef) (*messages.CallResult, error) {
	if ref == nil {
		return nil, errors.New("the result was not truncated")
	}
	var data []byte
	var err error
	if c.api.readsViaCoordinator() {
		data, err = c.reads.fullResultViaCoordinator(ctx, ref.Name)
	} else if data, err = c.reads.fullResultFromStore(ctx, ref); isNoJetStream(err) {
		c.api.noJetStream.Store(true)
		data, err = c.reads.fullResultViaCoordinator(ctx, ref.Name)
	}
	if err != nil {
		return nil, err
	}
	var res messages.CallResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("result %s: %w", ref.Name, err)
	}
	return &res, nil
}

// Wait returns the call's result once it is there. Unlike Watch it holds
// no consumer on the server, so any number of calls can be awaited at once.
// The result is the one written under the call's namespace, its tool's; a
// result another namespace wrote under its ID is ignored. Wait asks
// calls.get for the call's tool first, and, if no coordinator answers
// within ResultCheckInterval, takes the namespace from the call's queued
// event in the events stream.
func (c *Client) Wait(ctx context.Context, callID string) (*messages.CallResult, error) {
	if err := messages.ValidateID("call ID", callID); err != nil {
		return nil, err
	}
	if c.api.readsViaCoordinator() {
		return c.reads.waitViaCoordinator(ctx, callID)
	}
	ns, bucket := "", ""
	info, err := c.knownCall(ctx, callID)
	if err != nil {
		return nil, fmt.Errorf("wait for call %s: %w", callID, err)
	}
	if info != nil {
		if info.Result != nil {
			return info.Result, nil
		}
		ns, bucket = toolNamespace(info.Tool), messages.TurnBucket(info.Turn)
	}
	return c.ledger.AwaitResult(ctx, bucket, ns, callID)
}

// knownCall asks calls.get about a call before it is awaited or watched,
// so that an ID no call has (a typo, another installation's) is reported
// rather than awaited until ctx ends. A call not found is looked for once
// more a moment later: a quiet submit's call is stored just after its
// submit was sent. The info is nil, and no error, when no coordinator
// answered within ResultCheckInterval (or none could read JetStream): the wait goes on from the events
// stream, as it survives a coordinator's restart.
func (c *Client) knownCall(ctx context.Context, callID string) (*messages.CallInfo, error) {
	for look := 0; ; look++ {
		gctx, cancel := context.WithTimeout(ctx, ledger.ResultCheckInterval)
		info, err := c.Get(gctx, callID)
		cancel()
		switch {
		case err == nil:
			return info, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, messages.ErrCallNotFound):
			if look > 0 {
				return nil, err
			}
		case undecided(err):
			return nil, nil
		default:
			return nil, err
		}
		if err := transport.Sleep(ctx, unknownCallRecheck); err != nil {
			return nil, err
		}
	}
}

// unknownCallRecheck is how long knownCall waits before it looks again
// for a call calls.get did not find.
const unknownCallRecheck = 500 * time.Millisecond

// GetTraced is Get with the call's trace ID (CallInfo.TraceID), which
// costs the coordinator one more read; operators get it from Get too.
func (c *Client) GetTraced(ctx context.Context, callID string) (*messages.CallInfo, error) {
	var out messages.CallInfo
	return &out, c.api.request(ctx, messages.EndpointCallsGet, &messages.GetCallRequest{CallID: callID, Trace: true}, &out, read, 0)
}
