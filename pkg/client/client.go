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
//     SetToolEnabled, every Submit, which names its call by an idempotency
//     key or its own call ID) are made again while the context allows. Any
//     other request (Decide, Answer) is not: its attempt gets
//     Options.CoordinatorWait (10s) on top of the bound, the time a
//     coordinator may wait out a stream's election before it answers, and
//     an attempt that went unanswered even so fails with code timeout
//     (messages.ErrTimeout), which says that its outcome is unknown.
//
// Within an attempt, a request that is safe to repeat is copied while no
// answer has come after its hedge delay (three times the recent time to an
// answer or a receipt, at least Options.HedgeAfter, 250ms, at most 2s): two
// copies, then four, then one after each HedgeAfter, each to a
// coordinator the queue group picks, until a coordinator's receipt says it
// has the request; so a hung coordinator among several costs a request
// about a quarter of a second. A request that changes something is copied
// only while no coordinator has sent a receipt for it.
// A request whose connection was lost is sent again when it is back.
// Reads that cost the coordinator a scan (ListCalls, ListAudit,
// CallStats) ask for a receipt from their first copy, so that they are
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
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/tracing"
	"github.com/toolbus/toolbus/internal/transport"
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
	// messages.RouteSubject): with identities, one of the routes the
	// identities file gives its user, whose results the server lets it
	// receive. Defaults to a new route of the client's own.
	Route string
}

// requestRetry is the backoff between the attempts of a request.
var requestRetry = transport.RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second}

// maxNoResponderAttempts is how many times a request that no coordinator
// received is sent: enough to ride out a coordinator's restart, not so
// many that a caller with no coordinator at all waits long to hear so.
const maxNoResponderAttempts = 6

// Client talks to Toolbus over a NATS connection.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	inbox  *ledger.Inbox
	routes *ledger.Routes
	opts   Options
	names  messages.Names
	ledger *ledger.Ledger
	// noJetStream is set once the server said that the connection's
	// account has no JetStream: calls are then followed through the
	// coordinator (see readsViaCoordinator).
	noJetStream atomic.Bool
	// answerTime is the recent time coordinators took to answer a request
	// that no copy had to help, in nanoseconds (an exponentially weighted
	// mean; 0 before the first): what hedgeDelay scales with.
	answerTime atomic.Int64
}

// New returns a client on the connection.
func New(nc *nats.Conn, opts Options) (*Client, error) {
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
	return &Client{nc: nc, js: js, inbox: ledger.NewInbox(nc), routes: routes, opts: opts, names: names, ledger: ledger.New(nc, js, names)}, nil
}

// Close releases the client's subscriptions; the connection stays open.
func (c *Client) Close() {
	c.inbox.Close()
	c.routes.Close()
	c.ledger.Close()
}

// safety says whether a request may be sent again after an attempt that
// went unanswered.
type safety int

const (
	// once: an unanswered attempt may have been carried out, and a second
	// would be carried out again.
	once safety = iota
	// repeatable: requests whose repetition changes nothing.
	repeatable
	// read: requests that change nothing at all.
	read
	// scan: reads that cost the coordinator a scan of seconds (within a
	// budget): copied only while no coordinator has sent a receipt, which
	// the first copy asks for already, as a copy would cost another scan;
	// and given scanTime more to be answered in each attempt.
	scan
)

// scanTime is what an attempt of a scan is given on top of
// Options.RequestTimeout.
const scanTime = 25 * time.Second

// request sends one API request and decodes the reply into out, in
// attempts bounded by RequestTimeout plus wait (see the package doc).
// Error replies come back as *messages.Error, so errors.Is(err,
// messages.ErrToolNotFound) and the like work; a request that no
// coordinator received fails with messages.ErrNoResponders, and one that
// cannot be repeated and went unanswered with messages.ErrTimeout. A
// read or a repeatable request that the coordinator does not hold (wait
// 0) is hedged within each attempt (see hedged); a scan is not.
func (c *Client) request(ctx context.Context, endpoint string, in, out any, safe safety, wait time.Duration) error {
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
		ctx, cancel = context.WithTimeout(ctx, c.opts.DefaultTimeout)
		defer cancel()
	}
	policy := requestRetry
	policy.Attempt = c.opts.RequestTimeout + wait
	switch safe {
	case once:
		policy.Attempt += c.opts.CoordinatorWait
	case scan:
		policy.Attempt += scanTime
	}
	unanswered := false
	noResponders := 0
	var firstNoResponders time.Time
	policy.Retryable = func(err error) bool {
		var e *messages.Error
		switch {
		case errors.Is(err, messages.ErrNoResponders):
			noResponders++
			if safe == repeatable && wait == 0 {
				// Safe to send again however often: while no coordinator
				// listens (a server of the cluster restarting, coordinators
				// reconnecting), for up to NoCoordinatorWait.
				if firstNoResponders.IsZero() {
					firstNoResponders = time.Now()
				}
				return time.Since(firstNoResponders) < c.opts.NoCoordinatorWait
			}
			return noResponders < maxNoResponderAttempts
		case errors.Is(err, context.DeadlineExceeded):
			// Retry ends before asking if the caller's context ended, so
			// this is the attempt's bound.
			unanswered = true
			return safe != once
		case errors.As(err, &e):
			return safe != once && (e.Code == messages.CodeUnavailable || e.Code == messages.CodeTimeout)
		}
		return false
	}
	send := func(ctx context.Context) (*nats.Msg, error) {
		msg := &nats.Msg{Subject: subject, Header: nats.Header(c.opts.Codec.NewHeader()), Data: data}
		tracing.Inject(ctx, msg.Header)
		reply, err := c.nc.RequestMsgWithContext(ctx, msg)
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, noCoordinator(subject)
		}
		if err != nil {
			return nil, c.tooLarge(endpoint, msg, err)
		}
		return reply, nil
	}
	err = transport.Retry(ctx, policy, func(actx context.Context) error {
		var reply *nats.Msg
		var err error
		if safe == once {
			reply, err = send(actx)
		} else {
			// Only reads are copied before a coordinator was heard from:
			// a copy of a request that changes something may be answered
			// by what the first did (a cancel's too_late, a submit's
			// duplicate), so such copies go out only while no receipt has
			// come, to a coordinator that has not taken the first.
			reply, err = c.hedged(actx, subject, data, wait > 0 || safe == scan || safe == repeatable)
			if err != nil {
				err = c.tooLarge(endpoint, &nats.Msg{Data: data}, err)
			}
		}
		if err != nil {
			return err
		}
		return decodeReply(endpoint, reply, out)
	})
	switch {
	case err == nil:
		return nil
	case unanswered && safe == once && ctx.Err() == nil:
		return messages.Errorf(messages.CodeTimeout, "%s: no answer within %v; the outcome is unknown (a submit's call may have been queued)", endpoint, policy.Attempt)
	case messages.CodeOf(err) != messages.CodeInternal:
		return err
	}
	return fmt.Errorf("%s: %w", endpoint, err)
}

// hedged sends a request that is safe to repeat and returns the first
// answer to it or to one of its copies. The coordinators' queue group
// gives each copy to a coordinator at random; a copy goes out when no
// answer has come after HedgeAfter: two at once, then four after another
// HedgeAfter, then one after each HedgeAfter, until a coordinator sends a
// receipt for one of them (messages.HeaderReceipt; the copies ask for one
// on the client's route) or the answer comes. A live coordinator's receipt
// stops the copies, so a request that coordinators are slow to answer
// (waiting out an election, say) costs them a few copies at most, and a
// hung coordinator costs the request about one HedgeAfter: with one of two
// hung, longer than two only with a chance of 1 in 128, and longer than
// three with 1 in 256. A held request (wait > 0), a read that may keep a
// coordinator busy (calls.list, audit.list, stats.calls) and a request
// that changes something (a submit, a cancel) asks for a receipt from its
// first copy: each copy a live coordinator takes holds one of its user's
// waits, scans the stream again, or is answered as what the first did (a
// cancel's too_late, a submit's duplicate), and the receipt says that a
// coordinator has it. A request
// whose connection is lost is sent again once it is back, as its answer
// may be lost with it. A client without a route it receives on (an agent's
// user that named none) gets no receipts: it sends the copies of the first
// two rounds only, and a held request once. If every copy found no
// coordinator, that is the error.
func (c *Client) hedged(ctx context.Context, subject string, data []byte, held bool) (*nats.Msg, error) {
	// held: the first copy asks for a receipt, and without receipts there
	// are no copies.
	reply, answers, done, err := c.inbox.Register(64)
	if err != nil {
		return nil, err
	}
	defer done()
	var receipts <-chan *nats.Msg
	receiptTo := ""
	if c.opts.Route != "" || !c.readsViaCoordinator() {
		route, err := c.routes.Route()
		if err != nil {
			return nil, err
		}
		id := messages.RoutedCallID(route, messages.RandomToken())
		if receiptTo, err = c.names.CallRouteSubject(id); err != nil {
			return nil, err
		}
		var stop func()
		receipts, stop = c.routes.Await(id, "")
		defer stop()
	}
	sent, unheard := 0, 0
	launch := func(copies int, receipt bool) error {
		for range copies {
			msg := &nats.Msg{Subject: subject, Reply: reply, Header: nats.Header(c.opts.Codec.NewHeader()), Data: data}
			if receipt && receiptTo != "" {
				msg.Header.Set(messages.HeaderReceipt, receiptTo)
			}
			tracing.Inject(ctx, msg.Header)
			if err := c.nc.PublishMsg(msg); err != nil {
				return err
			}
			sent++
		}
		return nil
	}
	// An answer in flight when the connection is lost is lost with it:
	// the request is sent again on the new connection rather than waited
	// for until ctx ends.
	lost := c.nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED)
	defer c.nc.RemoveStatusListener(lost)
	if err := launch(1, held); err != nil {
		return nil, err
	}
	start := time.Now()
	hedge := time.NewTimer(c.hedgeDelay())
	defer hedge.Stop()
	next := hedge.C
	if held && receiptTo == "" {
		next = nil
	}
	rounds := 0
	for {
		select {
		case <-lost:
			rounds = 0
			if err := launch(1, true); err != nil {
				return nil, err
			}
			if !held || receiptTo != "" {
				hedge.Reset(c.opts.HedgeAfter)
				next = hedge.C
			}
		case msg := <-receipts:
			if msg.Header.Get(messages.HeaderReceipt) == messages.ReceiptSent {
				next = nil // a live coordinator has it
			}
		case msg := <-answers:
			if noCoordinatorListened(msg) {
				if unheard++; unheard == sent {
					return nil, noCoordinator(subject)
				}
				break
			}
			if sent == 1 && !held {
				c.observeAnswer(time.Since(start))
			}
			return msg, nil
		case <-next:
			rounds++
			if receiptTo == "" && rounds > 2 {
				next = nil
				break
			}
			if err := launch(hedgeCopies(rounds), true); err != nil {
				return nil, err
			}
			hedge.Reset(c.opts.HedgeAfter)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// hedgeCopies is how many copies of a request the nth round of hedging
// sends: 2, then 4, then one (a request that asked for a receipt and got
// none). With one coordinator of two not answering, a request reaches a
// live one within about two HedgeAfter but for a chance of 1 in 128.
func hedgeCopies(n int) int {
	switch n {
	case 1:
		return 2
	case 2:
		return 4
	}
	return 1
}

// hedgeDelay is how long a request, or a quiet submit, goes without news
// (an answer, or a receipt) before a copy is sent or the call looked up:
// three times the recent time coordinators took to answer or to send a
// receipt, at least HedgeAfter and at most ResultCheckInterval. A
// coordinator that does not answer costs about HedgeAfter while the
// others answer quickly, and coordinators slow to answer (busy) are not
// sent copies that would load them more.
func (c *Client) hedgeDelay() time.Duration {
	t := time.Duration(c.answerTime.Load())
	return min(max(3*t, c.opts.HedgeAfter), ledger.ResultCheckInterval)
}

// observeAnswer adds the time an answer took to answerTime, with a weight
// of one eighth.
func (c *Client) observeAnswer(d time.Duration) {
	for {
		old := c.answerTime.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if c.answerTime.CompareAndSwap(old, next) {
			return
		}
	}
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
	return &out, c.request(ctx, messages.EndpointToolsList, &req, &out, read, 0)
}

// Submit queues a call and returns at once, or, with req.Wait, when the
// result is there or the wait is over. Unless req names an idempotency key
// or a call ID, Submit names the call's ID itself, on req.Route or else on
// the client's route (with CoordinatorReads and no Options.Route, by an
// idempotency key of its own instead: such a user receives only the routes
// it was given), so that every submit can be sent again after an attempt
// that went unanswered without running the call twice.
func (c *Client) Submit(ctx context.Context, req messages.SubmitRequest) (*messages.SubmitReply, error) {
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
		case route == "" && c.opts.Route == "" && c.readsViaCoordinator():
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
	err := c.request(ctx, messages.EndpointCallsSubmit, &req, &out, safe, c.waitOf(&req))
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
			reply, exists, lerr := c.lookupCall(lctx, toolNamespace(req.Tool), callID)
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

// waitOf is how long the coordinator may hold the reply of a submit: its
// wait_ms, or else its timeout_ms and the second the coordinator adds, or
// else the coordinator's longest wait.
func (c *Client) waitOf(req *messages.SubmitRequest) time.Duration {
	switch {
	case !req.Wait:
		return 0
	case req.WaitMS > 0:
		return time.Duration(req.WaitMS) * time.Millisecond
	case req.TimeoutMS > 0:
		return time.Duration(req.TimeoutMS)*time.Millisecond + time.Second
	}
	return c.opts.MaxWait
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
// coordinator, or went unanswered, is sent again with the same call ID (or
// key), which guarantees the tool runs once. The wait for the result is
// bounded by ctx only, not by RequestTimeout: the call's own deadline
// (WithTimeout, or the tool's) ends it with a result.
func (c *Client) Call(ctx context.Context, tool string, args any, opts ...CallOption) (*messages.CallResult, error) {
	raw, err := toJSON(args)
	if err != nil {
		return nil, err
	}
	req := messages.SubmitRequest{Tool: tool, Arguments: raw, Agent: c.opts.Agent}
	for _, opt := range opts {
		opt(&req)
	}
	if req.IdempotencyKey == "" && (c.opts.Route != "" || !c.readsViaCoordinator()) {
		return c.callOnRoute(ctx, req, nil)
	}
	if c.readsViaCoordinator() {
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
		return c.waitViaCoordinator(ctx, reply.CallID)
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

// tooLarge turns the connection's refusal of a message larger than the
// server's max_payload into payload_too_large, which says both sizes; it
// returns any other error as it is.
func (c *Client) tooLarge(endpoint string, msg *nats.Msg, err error) error {
	if !errors.Is(err, nats.ErrMaxPayload) {
		return err
	}
	return messages.Errorf(messages.CodePayloadTooLarge, "%s: the request is %d bytes, more than the NATS server's max_payload of %d bytes",
		endpoint, len(msg.Data), c.nc.MaxPayload())
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
	return fmt.Sprintf("call %s of %s needs the user's approval: %s", e.CallID, e.Approval.Tool, e.Approval.Reason)
}

// ListApprovals lists approvals; State defaults to pending.
func (c *Client) ListApprovals(ctx context.Context, req messages.ListApprovalsRequest) (*messages.ListApprovalsReply, error) {
	var out messages.ListApprovalsReply
	return &out, c.request(ctx, messages.EndpointApprovalsList, &req, &out, read, 0)
}

// Decide approves or denies an approval.
func (c *Client) Decide(ctx context.Context, req messages.DecideRequest) (*messages.DecideReply, error) {
	if req.By == "" {
		req.By = c.opts.Agent
	}
	var out messages.DecideReply
	return &out, c.request(ctx, messages.EndpointApprovalsDecide, &req, &out, once, 0)
}

// Answer passes on the user's answer to an approval in prompt mode (see
// ApprovalRequiredError). Approvals in queue mode are for operators, who use Decide.
func (c *Client) Answer(ctx context.Context, req messages.DecideRequest) (*messages.DecideReply, error) {
	if req.By == "" {
		req.By = c.opts.Agent
	}
	var out messages.DecideReply
	return &out, c.request(ctx, messages.EndpointApprovalsAnswer, &req, &out, once, 0)
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
	return c.request(ctx, endpoint, &req, nil, repeatable, 0)
}

// LearningStatus says whether discovery learns from use and how much
// evidence there is, and with a tool, what was learned of it. For
// operators.
func (c *Client) LearningStatus(ctx context.Context, tool string) (*messages.LearningStatus, error) {
	var out messages.LearningStatus
	return &out, c.request(ctx, messages.EndpointLearningStatus, &messages.LearningStatusRequest{Tool: tool}, &out, read, 0)
}

// SetLearning switches learning from use on or off for the whole
// installation; switching it off needs a reason. For operators.
func (c *Client) SetLearning(ctx context.Context, enabled bool, reason string) (*messages.LearningStatus, error) {
	endpoint := messages.EndpointLearningDisable
	if enabled {
		endpoint = messages.EndpointLearningEnable
	}
	var out messages.LearningStatus
	return &out, c.request(ctx, endpoint, &messages.LearningSwitchRequest{Reason: reason, By: c.opts.Agent}, &out, repeatable, 0)
}

// ResetLearning deletes the usage evidence for a tool, or with an empty
// tool all of it. For operators.
func (c *Client) ResetLearning(ctx context.Context, tool string) (*messages.LearningResetReply, error) {
	var out messages.LearningResetReply
	return &out, c.request(ctx, messages.EndpointLearningReset, &messages.LearningResetRequest{Tool: tool, All: tool == "", By: c.opts.Agent}, &out, repeatable, 0)
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
	return &out, c.request(ctx, messages.EndpointCallsGet, &messages.GetCallRequest{CallID: callID}, &out, read, 0)
}

// Cancel asks to cancel a call.
func (c *Client) Cancel(ctx context.Context, callID, reason string) (*messages.CancelReply, error) {
	var out messages.CancelReply
	return &out, c.request(ctx, messages.EndpointCallsCancel, &messages.CancelRequest{CallID: callID, Reason: reason, By: c.opts.Agent}, &out, repeatable, 0)
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
	return &out, c.request(ctx, messages.EndpointToolsDiscover, &req, &out, safe, 0)
}

// Activate makes tools visible to the model for the rest of a turn.
func (c *Client) Activate(ctx context.Context, turn string, tools ...string) (*messages.ActivateReply, error) {
	var out messages.ActivateReply
	return &out, c.request(ctx, messages.EndpointToolsActivate, &messages.ActivateRequest{Agent: c.opts.Agent, Turn: turn, Tools: tools}, &out, repeatable, 0)
}

// Turn returns a turn's calls with their states and results.
func (c *Client) Turn(ctx context.Context, turn string) (*messages.TurnInfo, error) {
	var out messages.TurnInfo
	return &out, c.request(ctx, messages.EndpointTurnsGet, &messages.GetTurnRequest{Turn: turn}, &out, read, 0)
}

// ListCalls reads a page of the execution log (calls.list), newest call
// first; pass the reply's NextCursor in the request for the next page.
func (c *Client) ListCalls(ctx context.Context, req messages.CallsListRequest) (*messages.CallsListReply, error) {
	var out messages.CallsListReply
	return &out, c.request(ctx, messages.EndpointCallsList, &req, &out, scan, 0)
}

// Watch yields a call's events from the first, then live ones, and ends
// after the result. It reads JetStream directly and survives coordinator
// restarts; after an error it can simply be started again. With
// Options.CoordinatorReads, or once the server said the account has no
// JetStream, it follows the call with calls.events instead. Events written
// under another namespace than the call's (the one its queued event
// names) are skipped.
func (c *Client) Watch(ctx context.Context, callID string) iter.Seq2[*messages.CallEvent, error] {
	return func(yield func(*messages.CallEvent, error) bool) {
		if c.readsViaCoordinator() {
			c.watchViaCoordinator(ctx, callID)(yield)
			return
		}
		seen := false
		for ev, err := range c.ledger.Watch(ctx, "", callID) {
			if err != nil && !seen && isNoJetStream(err) {
				c.noJetStream.Store(true)
				c.watchViaCoordinator(ctx, callID)(yield)
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
	if c.readsViaCoordinator() {
		data, err = c.fullResultViaCoordinator(ctx, ref.Name)
	} else if data, err = c.fullResultFromStore(ctx, ref); isNoJetStream(err) {
		c.noJetStream.Store(true)
		data, err = c.fullResultViaCoordinator(ctx, ref.Name)
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

// fullResultFromStore reads a whole result from its results store.
func (c *Client) fullResultFromStore(ctx context.Context, ref *messages.ObjectRef) ([]byte, error) {
	obj, err := c.js.ObjectStore(ctx, ref.Bucket)
	if err != nil {
		return nil, fmt.Errorf("results store %s: %w", ref.Bucket, err)
	}
	data, err := obj.GetBytes(ctx, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("result %s: %w", ref.Name, err)
	}
	return data, nil
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
	if c.readsViaCoordinator() {
		return c.waitViaCoordinator(ctx, callID)
	}
	ns, bucket := "", ""
	gctx, cancel := context.WithTimeout(ctx, ledger.ResultCheckInterval)
	info, err := c.Get(gctx, callID)
	cancel()
	if err == nil {
		if info.Result != nil {
			return info.Result, nil
		}
		ns, bucket = toolNamespace(info.Tool), messages.TurnBucket(info.Turn)
	}
	return c.ledger.AwaitResult(ctx, bucket, ns, callID)
}
