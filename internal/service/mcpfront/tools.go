package mcpfront

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// cancelTimeout bounds the calls.cancel sent when a client cancels a call.
const cancelTimeout = 10 * time.Second

// toolList is the front's tools/list, the agent's tools.list for its turn,
// and its table of the tools whose tools/call mcp-go dispatches to call.
type toolList struct {
	cfg *Config
	log *slog.Logger
	// call runs a tools/call; servers are where register adds the tools.
	call    server.ToolHandlerFunc
	servers []*server.MCPServer
	// registered holds the names of the tools mcp-go dispatches here. It
	// is a dispatch table only: what a session sees comes from tools.list.
	registered sync.Map
	// lists holds the tools of tools/list requests between listRequest
	// and afterListTools.
	lists sync.Map
}

// hooks are the hooks through which an mcp-go server's tools/list and
// tools/call come to the list.
func (l *toolList) hooks() *server.Hooks {
	hooks := &server.Hooks{}
	hooks.AddOnRequestInitialization(l.listRequest)
	hooks.AddAfterListTools(l.afterListTools)
	hooks.AddOnError(l.listFailed)
	hooks.AddBeforeCallTool(l.beforeCallTool)
	return hooks
}

// visibleTools is tools.list for the request's agent and turn, as MCP tools.
func (l *toolList) visibleTools(ctx context.Context, turn string) ([]mcp.Tool, error) {
	reply, err := l.cfg.Client.ListTools(ctx, messages.ListToolsRequest{Agent: agentOf(ctx), Turn: turn, Format: "mcp"})
	if err != nil {
		return nil, err
	}
	tools := make([]mcp.Tool, 0, len(reply.Schemas))
	for _, schema := range reply.Schemas {
		var t mcp.Tool
		if err := json.Unmarshal(schema, &t); err != nil {
			return nil, fmt.Errorf("tool schema: %w", err)
		}
		// The schemas are passed as tools.list wrote them: mcp-go's own
		// types keep only some of their keywords.
		var raw struct {
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		}
		if json.Unmarshal(schema, &raw) == nil {
			if len(raw.InputSchema) > 0 {
				t.InputSchema = mcp.ToolInputSchema{}
				t.RawInputSchema = raw.InputSchema
			}
			if len(raw.OutputSchema) > 0 {
				t.OutputSchema = mcp.ToolOutputSchema{}
				t.RawOutputSchema = raw.OutputSchema
			}
		}
		tools = append(tools, t)
	}
	l.register(tools)
	for i := range tools {
		// Any call may be made a task.
		tools[i].Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
	}
	return tools, nil
}

// register makes mcp-go dispatch calls of the named tools to the bus.
// mcp-go tells its sessions that the list changed when a name is
// registered; that happens once per name in the life of a front.
func (l *toolList) register(tools []mcp.Tool) {
	var fresh []server.ServerTool
	for _, t := range tools {
		if _, loaded := l.registered.LoadOrStore(t.Name, true); !loaded {
			fresh = append(fresh, server.ServerTool{Tool: mcp.Tool{Name: t.Name, InputSchema: mcp.ToolInputSchema{Type: "object"}}, Handler: l.call})
		}
	}
	if len(fresh) > 0 {
		for _, srv := range l.servers {
			srv.AddTools(fresh...)
		}
	}
}

// listRequest asks tools.list for a tools/list request before mcp-go
// handles it, so that a refusal (another agent's turn, no coordinator) is
// the request's JSON-RPC error (-32600, invalid request): mcp-go's hooks
// after the list cannot fail it. The tools wait in l.lists for
// afterListTools.
func (l *toolList) listRequest(ctx context.Context, id any, message any) error {
	raw, ok := message.(json.RawMessage)
	if !ok {
		return nil
	}
	var req struct {
		Method string `json:"method"`
		Params struct {
			Meta *mcp.Meta `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &req) != nil || req.Method != string(mcp.MethodToolsList) {
		return nil
	}
	turn := turnOf(ctx, req.Params.Meta)
	tools, err := l.visibleTools(ctx, turn)
	if err != nil {
		return fmt.Errorf("tools.list: %w", err)
	}
	l.lists.Store(listKey(ctx, turn, id), tools)
	return nil
}

// listKey names a tools/list request. Two requests with one key are of the
// same agent and turn, whose lists are the same.
func listKey(ctx context.Context, turn string, id any) string {
	session := ""
	if s := server.ClientSessionFromContext(ctx); s != nil {
		session = s.SessionID()
	}
	return fmt.Sprintf("%s\x00%s\x00%s\x00%v", agentOf(ctx), turn, session, id)
}

// listFailed drops the tools kept for a tools/list request that mcp-go
// failed after listRequest (params it cannot parse), which afterListTools
// does not see.
func (l *toolList) listFailed(ctx context.Context, id any, method mcp.MCPMethod, message any, _ error) {
	if req, ok := message.(*mcp.ListToolsRequest); ok && method == mcp.MethodToolsList {
		l.lists.Delete(listKey(ctx, turnOf(ctx, req.Params.Meta), id))
	}
}

// afterListTools answers tools/list with the turn's tools, whatever mcp-go
// holds.
func (l *toolList) afterListTools(ctx context.Context, id any, req *mcp.ListToolsRequest, result *mcp.ListToolsResult) {
	turn := turnOf(ctx, req.Params.Meta)
	var tools []mcp.Tool
	if listed, ok := l.lists.LoadAndDelete(listKey(ctx, turn, id)); ok {
		tools = listed.([]mcp.Tool)
	} else {
		var err error
		if tools, err = l.visibleTools(ctx, turn); err != nil {
			l.log.Warn("tools.list failed", "agent", agentOf(ctx), "error", err)
			tools = []mcp.Tool{}
		}
	}
	result.Tools, result.NextCursor = tools, ""
}

// beforeCallTool registers a tool that the session sees but this front has
// not dispatched yet (a session that listed its tools on another front). A
// tool the session does not see stays unregistered, and mcp-go answers the
// call with the JSON-RPC error for an unknown tool.
func (l *toolList) beforeCallTool(ctx context.Context, _ any, req *mcp.CallToolRequest) {
	if _, ok := l.registered.Load(req.Params.Name); ok {
		return
	}
	if _, err := l.visibleTools(ctx, turnOf(ctx, req.Params.Meta)); err != nil {
		l.log.Warn("tools.list failed", "agent", agentOf(ctx), "error", err)
	}
}

// callRequest is a tools/call as the front runs it, whichever transport
// carried it.
type callRequest struct {
	name string
	args json.RawMessage
	meta *mcp.Meta
}

// progressToken is the request's progress token, nil without one.
func (c *callRequest) progressToken() mcp.ProgressToken {
	if c.meta == nil {
		return nil
	}
	return c.meta.ProgressToken
}

// callOut carries what a tools/call sends its client before the result:
// notifications, and an elicitation request.
type callOut interface {
	notify(ctx context.Context, method string, params map[string]any) error
	elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error)
}

// sessionOut sends through mcp-go's session of the request: stdio, and
// the stateless HTTP requests that mcp-go serves.
type sessionOut struct{}

var errNoSession = errors.New("no MCP session in the request's context")

// errNoElicitation is the error of a client that did not declare the
// elicitation capability: the front may not ask it.
var errNoElicitation = errors.New("the client did not declare the elicitation capability")

func (sessionOut) notify(ctx context.Context, method string, params map[string]any) error {
	srv := server.ServerFromContext(ctx)
	if srv == nil {
		return errNoSession
	}
	return srv.SendNotificationToClient(ctx, method, params)
}

func (sessionOut) elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	srv := server.ServerFromContext(ctx)
	if srv == nil {
		return nil, errNoSession
	}
	if s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok && s.GetClientCapabilities().Elicitation == nil {
		return nil, errNoElicitation
	}
	return srv.RequestElicitation(ctx, req)
}

// caller runs a tools/call as a durable Toolbus call, whichever transport
// carried it: it submits the call, has the user answer an approval in
// prompt mode, follows the call to its result with its progress, and
// cancels the call when the client cancels the request.
type caller struct {
	cfg *Config
	log *slog.Logger
	// draining is set by Shutdown: calls whose requests end then are left
	// running, not cancelled.
	draining atomic.Bool
	// stdioRequests holds the contexts of the stdio session's tools/call
	// requests in flight, by their clientCancelled marks (see
	// markClientCancelled).
	stdioRequests sync.Map
}

// clientCancelledKey holds a stdio request's mark: set when the client
// cancelled the request before its input ended.
type clientCancelledKey struct{}

// markClientCancelled is called once mcp-go has handled every line of a
// stdio session's input and before the input is taken as ended. mcp-go
// cancels a request's context on its reading goroutine as it handles the
// client's notifications/cancelled, so the requests whose contexts have
// ended by now are those the client cancelled (or that are over); those
// that end later end with the session, and their calls go on.
func (c *caller) markClientCancelled() {
	c.stdioRequests.Range(func(mark, ctx any) bool {
		if ctx.(context.Context).Err() != nil {
			mark.(*atomic.Bool).Store(true)
		}
		return true
	})
}

// call is mcp-go's handler of tools/call.
func (c *caller) call(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, err := json.Marshal(req.Params.Arguments)
	if err != nil || req.Params.Arguments == nil {
		args = []byte("{}")
	}
	return c.runCall(ctx, sessionOut{}, &callRequest{name: req.Params.Name, args: args, meta: req.Params.Meta})
}

// runCall runs a tools/call as a durable Toolbus call.
func (c *caller) runCall(ctx context.Context, out callOut, req *callRequest) (*mcp.CallToolResult, error) {
	if _, stdio := ctx.Value(transportKey{}).(context.Context); stdio {
		mark := &atomic.Bool{}
		ctx = context.WithValue(ctx, clientCancelledKey{}, mark)
		c.stdioRequests.Store(mark, ctx)
		defer c.stdioRequests.Delete(mark)
	}
	args := req.args
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	turn := turnOf(ctx, req.meta)
	submit := messages.SubmitRequest{Tool: req.name, Arguments: messages.JSON(args), Agent: agentOf(ctx), Turn: turn}
	progress := &progressOut{log: c.log, out: out, token: req.progressToken()}
	var res *messages.CallResult
	var err error
	if progress.token == nil {
		res, err = c.callAlone(ctx, out, progress, submit)
	} else {
		res, err = c.callWithProgress(ctx, out, progress, submit)
	}
	var refusal *messages.Error
	var held *heldCall
	switch {
	case errors.As(err, &held):
		return awaitingApproval(held.callID, held.approval), nil
	case errors.As(err, &refusal) && ctx.Err() == nil:
		// The coordinator refused the call, or could not be reached.
		return refused(refusal), nil
	case err != nil:
		return nil, err
	}
	if !res.IsError && toolNamespace(req.name) == discoveryNamespace && turn != "" {
		// What the turn sees has changed: its discovery page is saved.
		if err := out.notify(ctx, string(mcp.MethodNotificationToolsListChanged), nil); err != nil {
			c.log.Debug("list_changed not sent", "error", err)
		}
	}
	return toolResult(res, res.Truncated && c.declaresOutputSchema(ctx, req.name, turn)), nil
}

// declaresOutputSchema reports whether the tool's tools/list entry for the
// request's agent and turn has an outputSchema. It is asked of truncated
// results only. A tool it cannot find counts as declaring one: the error
// result that follows is one every client takes.
func (c *caller) declaresOutputSchema(ctx context.Context, tool, turn string) bool {
	reply, err := c.cfg.Client.ListTools(ctx, messages.ListToolsRequest{Agent: agentOf(ctx), Turn: turn, Namespace: toolNamespace(tool), Format: "mcp"})
	if err != nil {
		c.log.Debug("tools.list failed", "tool", tool, "error", err)
		return true
	}
	for _, schema := range reply.Schemas {
		var t struct {
			Name         string          `json:"name"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		}
		if json.Unmarshal(schema, &t) == nil && t.Name == tool {
			return len(t.OutputSchema) > 0 && string(t.OutputSchema) != "null"
		}
	}
	return true
}

// heldCall is the end of a tools/call whose call waits for an approval
// that the request does not wait for: it is answered with a result that
// says so.
type heldCall struct {
	callID   string
	approval *messages.Approval
}

func (h *heldCall) Error() string {
	return "call " + h.callID + " awaits approval " + h.approval.ApprovalID
}

// callAlone makes a call whose request wants its result alone: as
// pkg/client's Call does, on the front client's route, with no consumer
// and no subscription per call on the server. A call held for an approval
// is asked of the user (prompt mode) or answered at once (queue mode).
func (c *caller) callAlone(ctx context.Context, out callOut, progress *progressOut, submit messages.SubmitRequest) (*messages.CallResult, error) {
	res, err := c.cfg.Client.CallObserved(ctx, submit, &client.CallObserver{
		Named: func(callID string) { progress.callID = callID },
		Held:  func(*messages.SubmitReply) bool { return true },
	})
	var approval *client.ApprovalRequiredError
	switch {
	case errors.As(err, &approval):
		if approval.Approval.Mode == messages.ApprovalPrompt && c.elicit(ctx, out, approval.Approval) {
			return c.follow(ctx, progress)
		}
		return nil, &heldCall{callID: approval.CallID, approval: approval.Approval}
	case err != nil:
		c.cancelOnEnd(ctx, progress.callID)
		return nil, err
	}
	return res, nil
}

// callWithProgress submits a call and follows its events, for a request
// with a progress token. A call held for an operator's approval keeps the
// request open, which is told so.
func (c *caller) callWithProgress(ctx context.Context, out callOut, progress *progressOut, submit messages.SubmitRequest) (*messages.CallResult, error) {
	reply, err := c.cfg.Client.Submit(ctx, submit)
	if err != nil {
		return nil, err
	}
	progress.callID = reply.CallID
	if a := reply.Approval; reply.State == messages.StateAwaitingApproval && a != nil {
		switch {
		case a.Mode == messages.ApprovalPrompt && c.elicit(ctx, out, a):
			// Answered: the call runs, or its result says denied.
		case a.Mode == messages.ApprovalQueue:
			// The request stays open while an operator decides, saying so.
			progress.send(ctx, messages.Progress{Message: awaitingText(a)})
		default:
			return nil, &heldCall{callID: reply.CallID, approval: a}
		}
	}
	if reply.Result != nil {
		return reply.Result, nil
	}
	return c.follow(ctx, progress)
}

// cancelOnEnd cancels the call of a request that ended before its result
// because the client cancelled it (see cancels).
func (c *caller) cancelOnEnd(ctx context.Context, callID string) {
	if callID == "" || !c.cancels(ctx) {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	if _, err := c.cfg.Client.Cancel(cctx, callID, "cancelled by the MCP client"); err != nil {
		c.log.Warn("cancel failed", "call_id", callID, "error", err)
	}
}

// elicit asks the user, through MCP elicitation, to answer an approval in
// prompt mode, and passes the answer on (approvals.answer). It reports
// false when the client could not be asked (it does not support
// elicitation, or the transport cannot carry the request), and the call
// is then answered as awaiting approval.
func (c *caller) elicit(ctx context.Context, out callOut, a *messages.Approval) bool {
	message := fmt.Sprintf("Allow the call of %s?", a.Tool)
	if why := approvalWhy(a); why != "" {
		message += " " + why
	}
	if len(a.Arguments) > 0 {
		message += " Arguments: " + string(a.Arguments)
	}
	answer, err := out.elicit(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{
		Message: message,
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{"type": "boolean", "title": "Approve", "description": "Run the call"},
			},
			"required": []string{"approve"},
		},
	}})
	if err != nil {
		c.log.Debug("elicitation not possible", "approval_id", a.ApprovalID, "error", err)
		return false
	}
	decision, reason := messages.DecisionDeny, "the user declined"
	if answer.Action == mcp.ElicitationResponseActionAccept {
		if content, ok := answer.Content.(map[string]any); ok && content["approve"] == true {
			decision, reason = messages.DecisionApprove, "the user approved"
		}
	}
	if answer.Action == mcp.ElicitationResponseActionCancel {
		// The user dismissed the question: the approval stays pending.
		return false
	}
	if _, err := c.cfg.Client.Answer(ctx, messages.DecideRequest{ApprovalID: a.ApprovalID, Decision: decision, Reason: reason, By: agentOf(ctx)}); err != nil {
		c.log.Warn("approval answer failed", "approval_id", a.ApprovalID, "error", err)
		return false
	}
	return true
}

// progressOut sends a request's progress notifications. MCP wants each
// progress value above the one before: an event whose value is not is
// not sent (the worker coalesces reports, so a late copy of an older one
// may follow a newer one).
type progressOut struct {
	log    *slog.Logger
	out    callOut
	token  mcp.ProgressToken
	callID string
	sent   bool
	last   float64
}

func (p *progressOut) send(ctx context.Context, pr messages.Progress) {
	if p.token == nil || (p.sent && pr.Progress <= p.last) {
		return
	}
	params := map[string]any{"progressToken": p.token, "progress": pr.Progress}
	if pr.Total > 0 {
		params["total"] = pr.Total
	}
	if pr.Message != "" {
		params["message"] = pr.Message
	}
	if err := p.out.notify(ctx, string(mcp.MethodNotificationProgress), params); err != nil {
		p.log.Debug("progress not sent", "call_id", p.callID, "error", err)
		return
	}
	p.sent, p.last = true, pr.Progress
}

// follow waits for the call's result, sending its progress events as
// progress notifications when the request has a progress token. A client
// that cancels the request cancels the call (see cancels).
func (c *caller) follow(ctx context.Context, progress *progressOut) (*messages.CallResult, error) {
	callID := progress.callID
	if progress.token == nil {
		// Nobody asked for progress: wait for the result alone, which
		// costs no consumer on the server, unlike following every event.
		res, err := c.cfg.Client.Wait(ctx, callID)
		if err != nil {
			c.cancelOnEnd(ctx, callID)
			return nil, err
		}
		return res, nil
	}
	for ev, err := range c.cfg.Client.Watch(ctx, callID) {
		if err != nil {
			c.cancelOnEnd(ctx, callID)
			return nil, err
		}
		switch {
		case ev.Result != nil:
			return ev.Result, nil
		case ev.Progress != nil:
			progress.send(ctx, *ev.Progress)
		}
	}
	if err := ctx.Err(); err != nil {
		c.cancelOnEnd(ctx, callID)
		return nil, err
	}
	return nil, fmt.Errorf("the events of call %s ended without a result", callID)
}

func toolNamespace(tool string) string {
	name, err := messages.ParseToolName(tool)
	if err != nil {
		return ""
	}
	return name.Namespace
}

// refused is the result of a call the coordinator refused: a tool result
// with isError and the Toolbus code in _meta, so that the model reads why.
func refused(e *messages.Error) *mcp.CallToolResult {
	text := e.Error()
	if len(e.Details) > 0 {
		text += "\n- " + strings.Join(e.Details, "\n- ")
	}
	meta := map[string]any{MetaCode: string(e.Code)}
	if len(e.Details) > 0 {
		meta[MetaDetails] = e.Details
	}
	return &mcp.CallToolResult{
		Result:  mcp.Result{Meta: &mcp.Meta{AdditionalFields: meta}},
		Content: []mcp.Content{mcp.TextContent{Type: "text", Text: text}},
		IsError: true,
	}
}

// approvalWhy is what an approval says of itself, as one sentence: the
// message its exposure rule gives for the person deciding, else its reason.
func approvalWhy(a *messages.Approval) string {
	why := strings.TrimSpace(a.Message)
	if why == "" {
		why = strings.TrimSpace(a.Reason)
	}
	if why != "" && !strings.ContainsAny(why[len(why)-1:], ".!?") {
		why += "."
	}
	return why
}

// awaitingText says that a call waits for an approval: which, in which
// mode, why, who decides it.
func awaitingText(a *messages.Approval) string {
	text := fmt.Sprintf("The call of %s awaits approval %s (%s mode) and has not run yet.", a.Tool, a.ApprovalID, a.Mode)
	if why := approvalWhy(a); why != "" {
		text += " Reason: " + why
	}
	if a.Mode == messages.ApprovalPrompt {
		text += " The user answers it (approvals.answer); the call runs once approved."
	} else {
		text += " An operator decides it (approvals.decide); the call runs once approved."
	}
	return text
}

// awaitingApproval is the result of a call held for an approval: it has
// not run; the text names the approval to answer. It is an error result:
// not the tool's, which a client holding the tool's outputSchema (the
// official SDKs do) would refuse for its lack of structured content.
func awaitingApproval(callID string, a *messages.Approval) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Result: mcp.Result{Meta: &mcp.Meta{AdditionalFields: map[string]any{
			MetaCallID: callID, MetaState: string(messages.StateAwaitingApproval), MetaApprovalID: a.ApprovalID,
		}}},
		Content: []mcp.Content{mcp.TextContent{Type: "text", Text: awaitingText(a)}},
	}
}

// toolResult carries a call's result as MCP has it: every block as it is
// (a json block as text), isError, and the structured content as MCP
// allows it (toolschema.ForMCP: an object as it is, another value wrapped
// under "result", as the tool's outputSchema declares it; an error's as
// text); the call ID, and the Toolbus code of an error, in _meta.
//
// A truncated result says so in _meta (MetaTruncated, MetaFullResult).
// One of a tool that declares an outputSchema (outputSchema) is an error
// result whose first block says where the whole result is: what is left
// of it is not what the schema describes, and MCP clients refuse a
// result of such a tool that has no structuredContent and no isError.
func toolResult(res *messages.CallResult, outputSchema bool) *mcp.CallToolResult {
	meta := map[string]any{MetaCallID: res.CallID, MetaState: string(res.Status)}
	if res.IsError && res.Error != nil {
		meta[MetaCode] = res.Error.Code
	}
	out := &mcp.CallToolResult{Result: mcp.Result{Meta: &mcp.Meta{AdditionalFields: meta}}, Content: []mcp.Content{}, IsError: res.IsError}
	if res.Truncated {
		meta[MetaTruncated] = true
		if ref := res.FullResult; ref != nil {
			meta[MetaFullResult] = map[string]any{"bucket": ref.Bucket, "name": ref.Name, "size": ref.Size}
		}
		if outputSchema && !res.IsError {
			out.IsError = true
			out.Content = append(out.Content, mcp.TextContent{Type: "text", Text: truncatedText(res)})
			for _, b := range res.Content {
				out.Content = append(out.Content, content(b))
			}
			return out
		}
	}
	structured := toolschema.ForMCP(res.StructuredContent, res.IsError, res.Content)
	if structured.Content != nil {
		out.StructuredContent = json.RawMessage(structured.Content)
	}
	if structured.Wrapped {
		meta[MetaWrapped] = true
	}
	for _, b := range res.Content {
		out.Content = append(out.Content, content(b))
	}
	if structured.Text != nil {
		out.Content = append(out.Content, mcp.TextContent{Type: "text", Text: string(structured.Text)})
	}
	if len(out.Content) == 0 && res.IsError && res.Error != nil {
		out.Content = append(out.Content, mcp.TextContent{Type: "text", Text: res.Error.Message})
	}
	return out
}

// truncatedText says that a result was cut, and where the whole of it is.
func truncatedText(res *messages.CallResult) string {
	ref := res.FullResult
	if ref == nil {
		return fmt.Sprintf("The result of call %s was larger than the tool's max_result_size and was cut to it; the whole result was not kept. What is left of it follows.", res.CallID)
	}
	return fmt.Sprintf("The result of call %s was larger than the tool's max_result_size and was cut to it. The whole result, %d bytes of JSON, is object %s in bucket %s: calls.full_result reads it (toolbus calls get --full %s). What is left of it follows.",
		res.CallID, ref.Size, ref.Name, ref.Bucket, res.CallID)
}

func content(b messages.ContentBlock) mcp.Content {
	var annotated mcp.Annotated
	if a := b.Annotations; a != nil {
		raw, _ := json.Marshal(a)
		var ann mcp.Annotations
		if json.Unmarshal(raw, &ann) == nil {
			annotated.Annotations = &ann
		}
	}
	switch b.Type {
	case messages.ContentImage:
		return mcp.ImageContent{Annotated: annotated, Type: "image", Data: base64.StdEncoding.EncodeToString(b.Data), MIMEType: b.MIMEType}
	case messages.ContentAudio:
		return mcp.AudioContent{Annotated: annotated, Type: "audio", Data: base64.StdEncoding.EncodeToString(b.Data), MIMEType: b.MIMEType}
	case messages.ContentResource:
		if b.Text != "" || len(b.Data) == 0 {
			return mcp.EmbeddedResource{Annotated: annotated, Type: "resource", Resource: mcp.TextResourceContents{URI: b.URI, MIMEType: b.MIMEType, Text: b.Text}}
		}
		return mcp.EmbeddedResource{Annotated: annotated, Type: "resource", Resource: mcp.BlobResourceContents{URI: b.URI, MIMEType: b.MIMEType, Blob: base64.StdEncoding.EncodeToString(b.Data)}}
	case messages.ContentResourceLink:
		return mcp.ResourceLink{Annotated: annotated, Type: "resource_link", URI: b.URI, Name: b.Name, Description: b.Description, MIMEType: b.MIMEType}
	case messages.ContentJSON:
		return mcp.TextContent{Annotated: annotated, Type: "text", Text: string(toolschema.BlockJSON(b))}
	}
	return mcp.TextContent{Annotated: annotated, Type: "text", Text: b.Text}
}
