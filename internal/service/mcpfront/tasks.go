package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/pkg/messages"
)

// taskPollInterval is the poll interval a task suggests to its client.
const taskPollInterval = int64(1000)

// rpcMessage is the part of a JSON-RPC message the front reads to tell
// the requests it answers itself from those mcp-go answers.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  struct {
		TaskID string `json:"taskId"`
		// Cursor continues a tasks/list.
		Cursor    string          `json:"cursor"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Task      json.RawMessage `json:"task"`
		Meta      *mcp.Meta       `json:"_meta"`
		// RequestID is the request a notifications/cancelled cancels.
		RequestID json.RawMessage `json:"requestId"`
		// Capabilities are those an initialize request declares.
		Capabilities struct {
			Elicitation json.RawMessage `json:"elicitation"`
		} `json:"capabilities"`
	} `json:"params"`
	// Result and Error are those of a client's answer to a request of
	// the front's.
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// isTaskRequest reports whether a request is one the front answers from the
// call ledger rather than through mcp-go, which keeps tasks in memory: a
// task-augmented tools/call, and tasks/get, tasks/result, tasks/list and
// tasks/cancel. A task's ID is its Toolbus call's ID, so any front answers.
func (r *rpcMessage) isTaskRequest() bool {
	switch mcp.MCPMethod(r.Method) {
	case mcp.MethodTasksGet, mcp.MethodTasksResult, mcp.MethodTasksList, mcp.MethodTasksCancel:
		return len(r.ID) > 0
	case mcp.MethodToolsCall:
		return len(r.ID) > 0 && len(r.Params.Task) > 0 && string(r.Params.Task) != "null"
	}
	return false
}

// hasListCursor reports whether a request is a tools/list with a cursor.
// The front gives none (its tools/list is one page), so it refuses every
// one itself: mcp-go would take any base64 text for a tool's name to
// start after, and refuse other text with its decoder's error.
func (r *rpcMessage) hasListCursor() bool {
	return r.Method == string(mcp.MethodToolsList) && len(r.ID) > 0 && r.Params.Cursor != ""
}

// badListCursor is the error of a tools/list with a cursor.
func badListCursor(cursor string) *rpcError {
	return &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("invalid cursor %q: not a cursor this server gave (its tools/list is one page, without nextCursor); list without a cursor", cursor)}
}

// serveRequests answers over HTTP the requests the front serves itself:
// task requests, from the ledger, a session's tools/call with what the
// client posts about it (its cancellation, its answer to an elicitation),
// and a tools/list with a cursor, which it refuses.
// The rest go to mcp-go.
func (f *Front) serveRequests(w http.ResponseWriter, r *http.Request, agent string) {
	if r.Method != http.MethodPost {
		f.toMCPGo(w, r, agent, nil)
		return
	}
	body, err := readBody(r)
	if err != nil {
		http.Error(w, "request body: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '[' && json.Valid(trimmed) {
		// MCP dropped JSON-RPC batches (2025-06-18); mcp-go would call
		// the array invalid JSON.
		writeStatus(w, http.StatusBadRequest, newResponse(json.RawMessage("null"), nil, &rpcError{Code: mcp.PARSE_ERROR, Message: "JSON-RPC batches are not supported: send each request in a POST of its own"}))
		return
	}
	var req rpcMessage
	if json.Unmarshal(body, &req) != nil {
		f.toMCPGo(w, r, agent, body)
		return
	}
	if req.Method != "" && len(req.ID) > 0 && !validRequestID(req.ID) {
		// MCP: a request's ID is a string or a number, never null; an
		// answer that could not name the request would reach nobody.
		writeStatus(w, http.StatusBadRequest, newResponse(json.RawMessage("null"), nil, &rpcError{Code: mcp.INVALID_REQUEST, Message: "Invalid Request: a request's id must be a string or a number, not " + string(req.ID)}))
		return
	}
	if req.Method == string(mcp.MethodInitialize) {
		if turn := r.Header.Get(TurnHeader); turn != "" {
			if err := messages.ValidateID("turn", turn); err != nil {
				// Rather than a new turn, which would lose the one the
				// client means to resume.
				writeStatus(w, http.StatusBadRequest, newResponse(req.ID, nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: TurnHeader + ": " + err.Error()}))
				return
			}
		}
		if e := req.Params.Capabilities.Elicitation; len(e) > 0 && string(e) != "null" {
			// The session's ID says so (see sessionResolver).
			r = r.WithContext(context.WithValue(r.Context(), elicitsKey{}, true))
		}
	} else if v := r.Header.Get(server.HeaderKeyProtocolVersion); v != "" && !mcp.IsValidProtocolVersion(v) {
		// As mcp-go answers the requests it serves.
		http.Error(w, "Unsupported protocol version: "+v, http.StatusBadRequest)
		return
	}
	session := r.Header.Get(server.HeaderKeySessionID)
	turn, inSession := turnOfSession(session)
	inSession = inSession && !mcp.IsModernProtocol(r.Header.Get(server.HeaderKeyProtocolVersion))
	ctx := context.WithValue(context.WithValue(r.Context(), agentKey{}, agent), headerKey{}, r.Header)
	if inSession {
		ctx = context.WithValue(ctx, sessionTurnKey{}, turn)
	}
	switch {
	case req.isTaskRequest():
		result, rpcErr := f.task(ctx, &req)
		if err := writeResponse(w, newResponse(req.ID, result, rpcErr)); err != nil {
			f.log.Debug("task answer not sent", "error", err)
		}
	case session == "" && req.Method != string(mcp.MethodInitialize) && !mcp.IsModernProtocol(r.Header.Get(server.HeaderKeyProtocolVersion)) && req.Params.Meta.ProtocolVersion() == "":
		// A session-based request without its session, as MCP wants it
		// answered (mcp-go would say 404, which tells a client that its
		// session ended).
		writeStatus(w, http.StatusBadRequest, newResponse(req.ID, nil, &rpcError{Code: mcp.INVALID_REQUEST, Message: "Bad Request: Mcp-Session-Id header is required (initialize first, or name the protocol version 2026-07-28)"}))
	case req.hasListCursor():
		if err := writeResponse(w, newResponse(req.ID, nil, badListCursor(req.Params.Cursor))); err != nil {
			f.log.Debug("tools/list answer not sent", "error", err)
		}
	case !inSession:
		f.toMCPGo(w, r, agent, body)
	case req.Method == string(mcp.MethodToolsCall) && len(req.ID) > 0:
		f.serveCall(ctx, w, session, &req)
	case req.Method == string(mcp.MethodNotificationCancelled) && f.cancelRequest(agent, session, req.Params.RequestID):
		w.WriteHeader(http.StatusAccepted)
	case req.Method == "" && len(req.ID) > 0 && f.answerRequest(agent, session, &req):
		w.WriteHeader(http.StatusAccepted)
	default:
		f.toMCPGo(w, r, agent, body)
	}
}

// validRequestID reports whether id, as the client wrote it, is a JSON
// string or number.
func validRequestID(id json.RawMessage) bool {
	var v any
	if json.Unmarshal(id, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64:
		return true
	}
	return false
}

// writeStatus writes a JSON-RPC message with an HTTP status other than 200.
func writeStatus(w http.ResponseWriter, status int, msg *rpcResponse) {
	data, err := json.Marshal(msg)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// toMCPGo passes a request on to mcp-go, as agent's, with the body the
// front read from it, if it read it.
func (f *Front) toMCPGo(w http.ResponseWriter, r *http.Request, agent string, body []byte) {
	if body != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	f.http.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), agentKey{}, agent)))
}

// readBody reads a request's body, in one buffer of its length when the
// request gives it (guard has bounded it).
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, err
	}
	return body, nil
}

type rpcError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func taskNotFound(id string) *rpcError {
	return &rpcError{Code: mcp.INVALID_PARAMS, Message: "no task " + id}
}

func (f *Front) task(ctx context.Context, req *rpcMessage) (any, *rpcError) {
	agent := agentOf(ctx)
	if mcp.MCPMethod(req.Method) == mcp.MethodToolsCall {
		return f.createTask(ctx, req)
	}
	if mcp.MCPMethod(req.Method) == mcp.MethodTasksList {
		return f.listTasks(ctx, req.Params.Cursor)
	}
	id := req.Params.TaskID
	if messages.ValidateID("task", id) != nil {
		return nil, taskNotFound(id)
	}
	info, err := f.cfg.Client.Get(ctx, id)
	if err != nil || info.Agent != agent {
		if err == nil || messages.CodeOf(err) == messages.CodeCallNotFound || messages.CodeOf(err) == messages.CodeForbidden {
			return nil, taskNotFound(id)
		}
		return nil, busError(err)
	}
	switch mcp.MCPMethod(req.Method) {
	case mcp.MethodTasksGet:
		return taskOf(info), nil
	case mcp.MethodTasksCancel:
		if info.Result != nil {
			return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: "task " + id + " has ended: " + string(info.State)}
		}
		if _, err := f.cfg.Client.Cancel(ctx, id, "cancelled by the MCP client"); err != nil {
			return nil, busError(err)
		}
		if info, err = f.cfg.Client.Get(ctx, id); err != nil {
			return nil, busError(err)
		}
		t := taskOf(info)
		if !t.Status.IsTerminal() {
			t.Status, t.StatusMessage = mcp.TaskStatusCancelled, "cancellation requested"
		}
		return t, nil
	}
	res := info.Result
	if res == nil {
		if res, err = f.cfg.Client.Wait(ctx, id); err != nil {
			return nil, busError(err)
		}
	}
	out := toolResult(res, res.Truncated && f.calls.declaresOutputSchema(ctx, info.Tool, info.Turn))
	out.Meta.AdditionalFields[mcp.RelatedTaskMetaKey] = map[string]any{"taskId": id}
	return out, nil
}

// listTasks is tasks/list: the calls of the request's agent, every one of
// which tasks/get reads, whatever session or turn made it, newest first,
// one page of the execution log (calls.list) at a time; the cursor is the
// log's. Another agent's calls are never listed: calls.list filters on
// the agent, and refuses one the front's user may not act as.
func (f *Front) listTasks(ctx context.Context, cursor string) (any, *rpcError) {
	reply, err := f.cfg.Client.ListCalls(ctx, messages.CallsListRequest{Agent: agentOf(ctx), Cursor: cursor})
	if err != nil {
		if messages.CodeOf(err) == messages.CodeBadRequest {
			// MCP: an invalid cursor is invalid params.
			return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("invalid cursor %q: pass the nextCursor of an earlier tasks/list, or none for the first page", cursor), Data: map[string]any{MetaCode: string(messages.CodeBadRequest)}}
		}
		return nil, busError(err)
	}
	out := mcp.ListTasksResult{Tasks: make([]mcp.Task, 0, len(reply.Calls))}
	out.NextCursor = mcp.Cursor(reply.NextCursor)
	for i := range reply.Calls {
		out.Tasks = append(out.Tasks, taskOfEntry(&reply.Calls[i]))
	}
	return out, nil
}

// createTask submits a task-augmented tools/call and answers at once with
// the call's ID as the task's.
func (f *Front) createTask(ctx context.Context, req *rpcMessage) (any, *rpcError) {
	args := req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	reply, err := f.cfg.Client.Submit(ctx, messages.SubmitRequest{Tool: req.Params.Name, Arguments: messages.JSON(args), Agent: agentOf(ctx), Turn: turnOf(ctx, req.Params.Meta)})
	if err != nil {
		return nil, busError(err)
	}
	info := &messages.CallInfo{CallID: reply.CallID, State: reply.State, Approval: reply.Approval, Result: reply.Result, QueuedAt: time.Now()}
	return mcp.CreateTaskResult{Task: taskOf(info)}, nil
}

// busError is a refusal as a JSON-RPC error: -32602 for a tool that does
// not exist or arguments that do not fit, -32603 otherwise, with the
// Toolbus code in data.
func busError(err error) *rpcError {
	code := messages.CodeOf(err)
	e := &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error(), Data: map[string]any{MetaCode: string(code)}}
	switch code {
	case messages.CodeToolNotFound, messages.CodeInvalidArguments, messages.CodeInvalidName, messages.CodeNotAdmitted:
		e.Code = mcp.INVALID_PARAMS
	}
	var refusal *messages.Error
	if errors.As(err, &refusal) && len(refusal.Details) > 0 {
		e.Data[MetaDetails] = refusal.Details
	}
	return e
}

// taskOfEntry is a call of the execution log as an MCP task, as taskOf
// makes it of the call's record but for the status message of a call
// awaiting an approval, which the log does not name (tasks/get does).
func taskOfEntry(e *messages.CallLogEntry) mcp.Task {
	poll := taskPollInterval
	t := mcp.Task{TaskId: e.CallID, Status: mcp.TaskStatusWorking, PollInterval: &poll}
	switch e.State {
	case messages.StateCompleted:
		t.Status = mcp.TaskStatusCompleted
	case messages.StateCancelled:
		t.Status = mcp.TaskStatusCancelled
	case messages.StateFailed, messages.StateTimedOut, messages.StateDenied:
		t.Status = mcp.TaskStatusFailed
	case messages.StateAwaitingApproval:
		t.Status = mcp.TaskStatusInputRequired
		t.StatusMessage = "The call of " + e.Tool + " awaits an approval and has not run yet; tasks/get names the approval."
	}
	if e.Error != nil && t.Status != mcp.TaskStatusWorking {
		t.StatusMessage = e.Error.Message
	}
	updated := e.QueuedAt
	for _, at := range []time.Time{e.StartedAt, e.FinishedAt} {
		if at.After(updated) {
			updated = at
		}
	}
	t.CreatedAt = e.QueuedAt.UTC().Format(time.RFC3339Nano)
	t.LastUpdatedAt = updated.UTC().Format(time.RFC3339Nano)
	return t
}

// taskOf is a call as an MCP task.
func taskOf(info *messages.CallInfo) mcp.Task {
	created := info.QueuedAt
	if created.IsZero() {
		created = time.Now()
	}
	updated := created
	poll := taskPollInterval
	t := mcp.Task{TaskId: info.CallID, Status: mcp.TaskStatusWorking, PollInterval: &poll}
	switch {
	case info.Result != nil:
		updated = info.Result.FinishedAt
		switch info.Result.Status {
		case messages.StateCompleted:
			t.Status = mcp.TaskStatusCompleted
		case messages.StateCancelled:
			t.Status = mcp.TaskStatusCancelled
		default:
			t.Status = mcp.TaskStatusFailed
		}
		if info.Result.Error != nil {
			t.StatusMessage = info.Result.Error.Message
		}
	case info.State == messages.StateAwaitingApproval && info.Approval != nil:
		t.Status = mcp.TaskStatusInputRequired
		t.StatusMessage = awaitingText(info.Approval)
	case info.Progress != nil && info.Progress.Message != "":
		t.StatusMessage = info.Progress.Message
	}
	t.CreatedAt = created.UTC().Format(time.RFC3339Nano)
	if updated.IsZero() {
		updated = created
	}
	t.LastUpdatedAt = updated.UTC().Format(time.RFC3339Nano)
	return t
}
