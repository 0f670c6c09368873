package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/ledger"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// One model iteration in one request: calls.submit_batch reads the tool
// calls of a provider's response and submits each through the submit
// pipeline; calls.results waits for their results and renders them as
// the provider's next input.

// toolCall is one tool call read from a provider's response.
type toolCall struct {
	// id is the provider's tool-call ID; empty when the call has none.
	id   string
	name string
	args messages.JSON
	// refused is why the call cannot be submitted as it stands (its
	// arguments are not JSON, its ID is unusable); it is answered as the
	// call's error.
	refused *messages.Error
}

// toolCallReader reads the tool calls of one format from the JSON an
// agent has: the calls, or the message or response that holds them. It
// returns the response ID when the JSON carries one.
type toolCallReader func(raw json.RawMessage) (calls []toolCall, responseID string, err error)

var toolCallReaders = map[string]toolCallReader{
	toolschema.OpenAIChat:      readOpenAIChatCalls,
	toolschema.OpenAIResponses: readOpenAIResponsesCalls,
	toolschema.Anthropic:       readAnthropicCalls,
	toolschema.Gemini:          readGeminiCalls,
	toolschema.MCP:             readMCPCalls,
}

// readToolCalls reads the tool calls of a batch: at least one, at most
// messages.MaxBatchCalls; each with a usable ID or none, no ID twice.
func readToolCalls(format string, raw messages.JSON) ([]toolCall, string, error) {
	read, ok := toolCallReaders[format]
	if !ok {
		return nil, "", messages.Errorf(messages.CodeBadRequest, "unknown format %q; use one of %v", format, toolschema.Formats())
	}
	calls, responseID, err := read(json.RawMessage(raw))
	if err != nil {
		return nil, "", messages.Errorf(messages.CodeBadRequest, "tool_calls is not %s tool calls: %v", format, readError(err))
	}
	if len(calls) == 0 {
		return nil, "", messages.Errorf(messages.CodeBadRequest, "tool_calls holds no %s tool call", format)
	}
	if len(calls) > messages.MaxBatchCalls {
		return nil, "", messages.Errorf(messages.CodeBadRequest, "tool_calls holds %d tool calls; at most %d", len(calls), messages.MaxBatchCalls)
	}
	seen := make(map[string]bool, len(calls))
	for i := range calls {
		tc := &calls[i]
		if len(tc.name) > messages.MaxToolCallNameLength && tc.refused == nil {
			tc.refused = messages.Errorf(messages.CodeInvalidName, "the tool name is %d bytes; at most %d", len(tc.name), messages.MaxToolCallNameLength)
		}
		// The reply repeats the ID and name: cut to their bounds, so that
		// a hostile batch cannot make its reply too large to send, and
		// calls.results takes the reply as it comes.
		tc.name = repeatable(tc.name, messages.MaxToolCallNameLength)
		if tc.id == "" {
			continue
		}
		if tc.refused == nil {
			if err := messages.ValidateToolCallID(tc.id); err != nil {
				tc.refused = messages.AsError(err)
			}
		}
		tc.id = repeatable(tc.id, messages.MaxToolCallIDLength)
		// A call refused for another reason still holds its ID: the model
		// gets one result per ID.
		if seen[tc.id] && tc.refused == nil {
			tc.refused = messages.Errorf(messages.CodeBadRequest, "tool-call ID %s appears twice in the batch", tc.id)
		}
		seen[tc.id] = true
	}
	return calls, responseID, nil
}

// repeatable is s as a reply may repeat it: UTF-8, at most max bytes.
func repeatable(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// readError says why JSON could not be read as a format's, in the terms
// of JSON rather than of the Go types it was read into.
func readError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err
	}
	what := "the value"
	if te.Field != "" {
		what = te.Field
	}
	want := "another kind of value"
	switch te.Type.Kind() {
	case reflect.Slice, reflect.Array:
		want = "an array"
	case reflect.Struct, reflect.Map:
		want = "an object"
	case reflect.String:
		want = "a string"
	}
	return fmt.Errorf("%s is a JSON %s, want %s", what, te.Value, want)
}

// list reads raw as an array of T.
func list[T any](raw json.RawMessage) ([]T, error) {
	var out []T
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// isArray tells whether raw is a JSON array.
func isArray(raw json.RawMessage) bool {
	b := bytes.TrimLeft(raw, " \t\r\n")
	return len(b) > 0 && b[0] == '['
}

// argumentsOf returns a call's arguments: an object as it is, absent or
// null as {}.
func argumentsOf(raw json.RawMessage) messages.JSON {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return messages.JSON(`{}`)
	}
	return messages.JSON(raw)
}

// OpenAI Chat Completions: the tool_calls of an assistant message, each
// {"id","type":"function","function":{"name","arguments"}} with the
// arguments as a JSON string. Taken from the array itself, the assistant
// message, or the response (its first choice's message).
func readOpenAIChatCalls(raw json.RawMessage) ([]toolCall, string, error) {
	if !isArray(raw) {
		var holder struct {
			ID      string `json:"id"`
			Choices []struct {
				Message json.RawMessage `json:"message"`
			} `json:"choices"`
			Role      *string         `json:"role"`
			ToolCalls json.RawMessage `json:"tool_calls"`
		}
		if err := json.Unmarshal(raw, &holder); err != nil {
			return nil, "", err
		}
		switch {
		case len(holder.Choices) > 0:
			if holder.Choices[0].Message == nil {
				return nil, "", fmt.Errorf("the response's first choice has no message")
			}
			calls, _, err := readOpenAIChatCalls(holder.Choices[0].Message)
			return calls, holder.ID, err
		case holder.ToolCalls != nil:
			raw = holder.ToolCalls
		case holder.Role != nil:
			return nil, "", nil // a message without tool calls
		default:
			return nil, "", fmt.Errorf("it is neither a response (choices), an assistant message (role, tool_calls) nor an array of tool calls")
		}
	}
	items, err := list[struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}](raw)
	if err != nil {
		return nil, "", err
	}
	calls := make([]toolCall, 0, len(items))
	for _, it := range items {
		tc := toolCall{id: it.ID, name: it.Function.Name}
		if it.Type != "" && it.Type != "function" {
			tc.refused = messages.Errorf(messages.CodeBadRequest, "tool call of type %q: Toolbus runs function calls", it.Type)
		}
		tc.args, tc.refused = stringArguments(it.Function.Name, it.Function.Arguments, tc.refused)
		calls = append(calls, tc)
	}
	return calls, "", nil
}

// stringArguments reads arguments that OpenAI sends as a JSON string
// holding a JSON object. An object given as such is taken as it is. A
// string that is not JSON, as a model may write, or JSON that is not an
// object refuses the call with invalid_arguments.
func stringArguments(tool string, raw json.RawMessage, refused *messages.Error) (messages.JSON, *messages.Error) {
	args, refused := stringArgumentsJSON(tool, raw, refused)
	if refused == nil {
		if t := bytes.TrimSpace(args); len(t) == 0 || t[0] != '{' {
			return nil, messages.Errorf(messages.CodeInvalidArguments, "arguments of %s are not a JSON object", tool)
		}
	}
	return args, refused
}

// stringArgumentsJSON is the JSON of stringArguments, object or not.
func stringArgumentsJSON(tool string, raw json.RawMessage, refused *messages.Error) (messages.JSON, *messages.Error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '"' {
		return argumentsOf(raw), refused
	}
	var s string
	if err := json.Unmarshal(t, &s); err != nil {
		return nil, messages.Errorf(messages.CodeInvalidArguments, "arguments of %s are not a JSON string: %v", tool, err)
	}
	if len(bytes.TrimSpace([]byte(s))) == 0 {
		return messages.JSON(`{}`), refused
	}
	if !json.Valid([]byte(s)) {
		if refused != nil {
			return nil, refused
		}
		return nil, messages.Errorf(messages.CodeInvalidArguments, "arguments of %s are not JSON: %.200q", tool, s)
	}
	return messages.JSON(s), refused
}

// OpenAI Responses: the function_call items of a response's output,
// {"type":"function_call","call_id","name","arguments"}; other items
// (reasoning, messages) are passed over. Taken from the items or the
// response.
func readOpenAIResponsesCalls(raw json.RawMessage) ([]toolCall, string, error) {
	responseID := ""
	if !isArray(raw) {
		var resp struct {
			ID     string          `json:"id"`
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(raw, &resp); err != nil {
			return nil, "", err
		}
		if resp.Output == nil {
			return nil, "", fmt.Errorf("no output")
		}
		raw, responseID = resp.Output, resp.ID
	}
	items, err := list[struct {
		Type      string          `json:"type"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}](raw)
	if err != nil {
		return nil, "", err
	}
	var calls []toolCall
	for _, it := range items {
		if it.Type != "function_call" {
			continue
		}
		tc := toolCall{id: it.CallID, name: it.Name}
		tc.args, tc.refused = stringArguments(it.Name, it.Arguments, nil)
		calls = append(calls, tc)
	}
	return calls, responseID, nil
}

// Anthropic Messages: the tool_use blocks of the assistant's content,
// {"type":"tool_use","id","name","input"}; other blocks (text, thinking,
// server tools) are passed over. Taken from the blocks or the message.
func readAnthropicCalls(raw json.RawMessage) ([]toolCall, string, error) {
	responseID := ""
	if !isArray(raw) {
		var msg struct {
			ID      string          `json:"id"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(raw, &msg); err != nil {
			return nil, "", err
		}
		if msg.Content == nil {
			return nil, "", fmt.Errorf("the message has no content")
		}
		if c := bytes.TrimSpace(msg.Content); len(c) > 0 && c[0] == '"' {
			return nil, msg.ID, nil // content given as a string is text alone
		}
		raw, responseID = msg.Content, msg.ID
	}
	blocks, err := list[struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}](raw)
	if err != nil {
		return nil, "", err
	}
	var calls []toolCall
	for _, b := range blocks {
		if b.Type != "tool_use" {
			continue
		}
		calls = append(calls, objectCall(b.ID, b.Name, b.Input))
	}
	return calls, responseID, nil
}

// objectCall is a call whose arguments must be a JSON object (or absent).
func objectCall(id, name string, args json.RawMessage) toolCall {
	tc := toolCall{id: id, name: name, args: argumentsOf(args)}
	if t := bytes.TrimSpace(tc.args); len(t) == 0 || t[0] != '{' {
		tc.refused = messages.Errorf(messages.CodeInvalidArguments, "arguments of %s are not a JSON object", name)
	}
	return tc
}

// Gemini: the functionCall parts of a candidate's content,
// {"functionCall":{"id"?,"name","args"}}; other parts are passed over.
// Taken from the parts, the content, or the GenerateContentResponse (its
// first candidate, and its responseId).
func readGeminiCalls(raw json.RawMessage) ([]toolCall, string, error) {
	responseID := ""
	if !isArray(raw) {
		var holder struct {
			ResponseID string `json:"responseId"`
			Candidates []struct {
				Content struct {
					Parts json.RawMessage `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
			PromptFeedback *struct {
				BlockReason string `json:"blockReason"`
			} `json:"promptFeedback"`
			Parts json.RawMessage `json:"parts"`
		}
		if err := json.Unmarshal(raw, &holder); err != nil {
			return nil, "", err
		}
		switch {
		case len(holder.Candidates) > 0:
			raw, responseID = holder.Candidates[0].Content.Parts, holder.ResponseID
		case holder.Parts != nil:
			raw = holder.Parts
		case holder.PromptFeedback != nil && holder.PromptFeedback.BlockReason != "":
			return nil, "", fmt.Errorf("the response has no candidate: its prompt was blocked (%s)", holder.PromptFeedback.BlockReason)
		case holder.ResponseID != "" || holder.Candidates != nil || holder.PromptFeedback != nil:
			return nil, "", fmt.Errorf("the response has no candidate")
		default:
			return nil, "", fmt.Errorf("it is neither a GenerateContentResponse (candidates), a content (parts) nor an array of parts")
		}
		if raw == nil {
			return nil, responseID, nil
		}
	}
	parts, err := list[struct {
		FunctionCall *struct {
			ID   string          `json:"id"`
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"functionCall"`
	}](raw)
	if err != nil {
		return nil, "", err
	}
	var calls []toolCall
	for _, p := range parts {
		if fc := p.FunctionCall; fc != nil {
			calls = append(calls, objectCall(fc.ID, fc.Name, fc.Args))
		}
	}
	return calls, responseID, nil
}

// MCP: tools/call requests, as JSON-RPC requests
// {"jsonrpc":"2.0","id","method":"tools/call","params":{"name","arguments"}}
// (requests of other methods are passed over) or as their params alone.
// A request's id is the call's ID: a string as it is, a number as its
// decimal text.
func readMCPCalls(raw json.RawMessage) ([]toolCall, string, error) {
	if !isArray(raw) {
		raw = append(append(json.RawMessage{'['}, raw...), ']')
	}
	type params struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	items, err := list[struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
		Params *params         `json:"params"`
		params
	}](raw)
	if err != nil {
		return nil, "", err
	}
	var calls []toolCall
	for _, it := range items {
		if it.Method == nil {
			calls = append(calls, objectCall("", it.Name, it.Arguments))
			continue
		}
		if *it.Method != "tools/call" {
			continue
		}
		if it.Params == nil {
			return nil, "", fmt.Errorf("a tools/call request without params")
		}
		tc := objectCall("", it.Params.Name, it.Params.Arguments)
		if tc.id, err = jsonRPCID(it.ID); err != nil {
			return nil, "", err
		}
		calls = append(calls, tc)
	}
	return calls, "", nil
}

// jsonRPCID reads a JSON-RPC request ID: a string, a number, or none.
func jsonRPCID(raw json.RawMessage) (string, error) {
	t := bytes.TrimSpace(raw)
	switch {
	case len(t) == 0 || string(t) == "null":
		return "", nil
	case t[0] == '"':
		var s string
		err := json.Unmarshal(t, &s)
		return s, err
	}
	var n json.Number
	if err := json.Unmarshal(t, &n); err != nil {
		return "", fmt.Errorf("a JSON-RPC id must be a string or a number, not %.40s", t)
	}
	// A whole number is its decimal text however it is written (1e2 is
	// 100); any other number is kept as it was written.
	if f, err := n.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10), nil
	}
	return n.String(), nil
}

// idempotencyKey is the key a batch's call is submitted with: the turn
// and the provider's tool-call ID, or, for a call without one, a digest
// of the response ID, the call's position in the batch, its name and its
// arguments.
func idempotencyKey(turn, responseID string, position int, tc *toolCall) string {
	if tc.id != "" {
		return turn + "/" + tc.id
	}
	args := []byte(tc.args)
	if decoded, err := policy.DecodeArguments(tc.args); err == nil {
		args = []byte(policy.DigestOf(decoded))
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00", responseID, position, tc.name)
	h.Write(args)
	return turn + "/#" + hex.EncodeToString(h.Sum(nil)[:16])
}

// submitBatch is calls.submit_batch: each tool call goes through the
// submit pipeline at once, as a submit of its own without wait, and the
// reply waits for all of them. A call's writes are published without
// waiting for those of the others (send awaits their acknowledgements
// on the ledger's goroutine). A call refused on its own (policy, exposure,
// schema, a name that is no tool) is answered as such; an error of
// JetStream or of the coordinator fails the request, which is safe to
// send again since every call has its idempotency key.
func (c *Coordinator) submitBatch(ctx context.Context, req *request) (any, error) {
	var br messages.SubmitBatchRequest
	if err := req.decode(&br); err != nil {
		return nil, err
	}
	// The identity check reads the agent of a submit; a batch acts as its
	// agent as each of its submits does, and its notify is refused as theirs.
	probe := messages.SubmitRequest{Agent: br.Agent, Turn: br.Turn, Notify: br.Notify}
	ctx, err := req.admit(ctx, &probe)
	if err != nil {
		return nil, err
	}
	br.Agent = probe.Agent
	if err := br.Validate(); err != nil {
		return nil, err
	}
	format := br.ResultsFormat
	if format == "" {
		format = br.Format
	}
	if _, ok := resultRenderers[format]; !ok {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown results_format %q; use one of %v", format, toolschema.Formats())
	}
	if br.WaitMS <= 0 {
		return c.SubmitBatch(ctx, &br, req.Headers())
	}
	// The wait is held from the start, against the user's waits, and
	// bounded by MaxWait: the results may come before the batch's writes
	// are acknowledged, and are taken as they come.
	release, err := c.waits.hold(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { release() }()
	wctx, cancel := context.WithTimeout(ctx, min(time.Duration(br.WaitMS)*time.Millisecond, c.cfg.MaxWait))
	defer cancel()
	var waits *copyWaits
	defer func() {
		if waits != nil {
			waits.stop()
		}
	}()
	out, err := c.submitBatchCalls(ctx, &br, req.Headers(), func(submits []*messages.SubmitRequest) error {
		waits, err = c.awaitCopies(wctx, submits)
		return err
	})
	if err != nil {
		return nil, err
	}
	if out.Results = c.renderFresh(ctx, out, format, waits); out.Results != nil {
		return out, nil
	}
	// A call the batch did not queue itself (a batch sent again): as
	// calls.results answers, for what is left of the wait.
	waits.stop()
	release()
	release = func() {}
	left := time.Until(deadlineOf(wctx))
	if wctx.Err() != nil || left < time.Millisecond {
		left = 0
	}
	if out.Results, err = c.results(ctx, &messages.ResultsRequest{Format: format, Calls: out.Calls, WaitMS: left.Milliseconds()}); err != nil {
		return nil, err
	}
	return out, nil
}

// deadlineOf is ctx's deadline; ctx has one.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// copyWaits waits, for each call a batch queues, for the copy of its
// committed result that the events stream republishes (RepublishSource),
// on a subscription made before the call is queued, so that no result
// slips past it: a result is taken without reading the stream (each wait
// also asks the stream now and then, Ledger.WaitOn). The waits go on
// while the batch's writes are acknowledged.
type copyWaits struct {
	subs []*nats.Subscription
	log  *slog.Logger
	wg   sync.WaitGroup
	mu   sync.Mutex
	// got holds the results that came, and stops each wait, by call ID.
	got   map[string]*messages.CallResult
	stops map[string]context.CancelFunc
}

// copySubject is the subject the events stream republishes the result of
// a call without a route to: its ID split after RouteLength characters,
// as RepublishDestination splits every result's (see messages.Names),
// and the namespace that wrote it.
func copySubject(names messages.Names, callID, ns string) (string, bool) {
	if len(callID) <= messages.RouteLength {
		return "", false
	}
	return names.Prefix() + ".results." + callID[:messages.RouteLength] + "." + callID[messages.RouteLength:] + "." + ns, true
}

// awaitCopies subscribes to the result copies of the calls of submits
// (nil entries are calls refused already) and waits for them until ctx
// ends or stop.
func (c *Coordinator) awaitCopies(ctx context.Context, submits []*messages.SubmitRequest) (*copyWaits, error) {
	w := &copyWaits{log: c.log, got: map[string]*messages.CallResult{}, stops: map[string]context.CancelFunc{}}
	for _, sr := range submits {
		if sr == nil || sr.IdempotencyKey == "" {
			continue
		}
		name, err := messages.ParseToolName(sr.Tool)
		if err != nil {
			continue // refused by its submit
		}
		id := messages.IdempotentCallID(sr.Agent, sr.IdempotencyKey)
		subject, ok := copySubject(c.names, id, name.Namespace)
		if !ok {
			continue
		}
		copies := make(chan *nats.Msg, 4)
		sub, err := c.nc.ChanSubscribe(subject, copies)
		if err != nil {
			w.stop()
			return nil, unavailable(err, "subscribe to results")
		}
		w.subs = append(w.subs, sub)
		cctx, stop := context.WithCancel(ctx)
		w.stops[id] = stop
		w.wg.Add(1)
		c.handlers.Go(func() {
			defer w.wg.Done()
			if res, err := c.ledger.WaitOn(cctx, messages.TurnBucket(sr.Turn), name.Namespace, id, copies); err == nil {
				w.mu.Lock()
				w.got[id] = res
				w.mu.Unlock()
			}
		})
	}
	return w, nil
}

// results ends the waits of all calls but keep, waits for those, and
// returns the results that came.
func (w *copyWaits) results(keep map[string]bool) map[string]*messages.CallResult {
	for id, stop := range w.stops {
		if !keep[id] {
			stop()
		}
	}
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got
}

// stop ends every wait and subscription.
func (w *copyWaits) stop() {
	for _, stop := range w.stops {
		stop()
	}
	w.wg.Wait()
	for _, sub := range w.subs {
		if err := sub.Unsubscribe(); err != nil {
			w.log.Debug("unsubscribe from result copies", "subject", sub.Subject, "error", err)
		}
	}
	w.subs = nil
}

// renderFresh renders a batch's calls as calls.results does once the
// calls it queued have ended or the wait has: the calls still unfinished
// then are read, as they are. It returns nil, waiting for nothing, when
// a call the batch accepted was not queued by it (a duplicate): that is
// calls.results' to answer.
func (c *Coordinator) renderFresh(ctx context.Context, out *messages.SubmitBatchReply, format string, waits *copyWaits) *messages.ResultsReply {
	fresh := map[string]bool{}
	for _, bc := range out.Calls {
		switch {
		case bc.Error != nil, bc.State == messages.StateAwaitingApproval && !bc.Duplicate:
		case bc.State == messages.StateQueued && !bc.Duplicate && waits.stops[bc.CallID] != nil:
			fresh[bc.CallID] = true
		default:
			return nil
		}
	}
	got := waits.results(fresh)
	var still []string
	for id := range fresh {
		if got[id] == nil {
			still = append(still, id)
		}
	}
	snaps := map[string]*ledger.Snapshot{}
	if len(still) > 0 {
		if read, err := c.calls.snapshots(ctx, still...); err == nil {
			snaps = read
		}
	}
	res := &messages.ResultsReply{Calls: make([]messages.BatchCall, len(out.Calls)), Complete: true}
	outcomes := make([]callOutcome, len(out.Calls))
	for i, bc := range out.Calls {
		o := callOutcome{call: bc}
		if r := got[bc.CallID]; r != nil && bc.CallID != "" {
			o.call.State, o.result, o.tool = r.Status, r, r.Tool
		} else if s := snaps[bc.CallID]; s != nil && bc.CallID != "" {
			o.observe(s)
		}
		if o.result == nil && o.call.Error == nil {
			res.Complete = false
		}
		outcomes[i], res.Calls[i] = o, o.call
	}
	// The reply holds the calls twice: as the batch's and as the results'.
	res.Messages = fitMessages(resultRenderers[format], outcomes, c.messagesBudget(2*len(marshalJSON(out.Calls))))
	return res
}

// SubmitBatch checks and queues the tool calls of one model iteration, as
// calls.submit_batch does; headers carry the caller's trace context.
func (c *Coordinator) SubmitBatch(ctx context.Context, br *messages.SubmitBatchRequest, headers map[string][]string) (*messages.SubmitBatchReply, error) {
	return c.submitBatchCalls(ctx, br, headers, nil)
}

// submitBatchCalls is SubmitBatch; before, when set, is given the submits
// before any is run (nil for a call refused already).
func (c *Coordinator) submitBatchCalls(ctx context.Context, br *messages.SubmitBatchRequest, headers map[string][]string, before func(submits []*messages.SubmitRequest) error) (*messages.SubmitBatchReply, error) {
	calls, responseID, err := readToolCalls(br.Format, br.ToolCalls)
	if err != nil {
		return nil, err
	}
	if br.ResponseID != "" {
		responseID = br.ResponseID
	}
	// Claimed once for the batch, the turn's owner is remembered, and each
	// call's own claim reads nothing: the calls do not race to create the
	// turn. The claim goes on while the calls are read and checked; each
	// call waits for it before anything of the call is decided or written.
	claimed := make(chan struct{})
	c.handlers.Go(func() {
		defer close(claimed)
		c.claimBatchTurn(ctx, br.Turn, br.Agent)
	})
	out := &messages.SubmitBatchReply{Calls: make([]messages.BatchCall, len(calls))}
	submits := make([]*messages.SubmitRequest, len(calls))
	for i := range calls {
		tc := &calls[i]
		out.Calls[i] = messages.BatchCall{ToolCallID: tc.id, Name: tc.name}
		if tc.refused != nil {
			out.Calls[i].Error = tc.refused
			continue
		}
		submits[i] = &messages.SubmitRequest{
			Tool:           tc.name,
			Arguments:      tc.args,
			Agent:          br.Agent,
			Turn:           br.Turn,
			IdempotencyKey: idempotencyKey(br.Turn, responseID, i, tc),
			TimeoutMS:      br.TimeoutMS,
			Notify:         br.Notify,
		}
	}
	if before != nil {
		if err := before(submits); err != nil {
			<-claimed
			return nil, err
		}
	}
	// The claim's reads and writes end with ctx.
	claimTurn := func(ctx context.Context) error {
		<-claimed
		if ts := c.submitter.turns; ts != nil {
			return ts.claimForCall(ctx, br.Turn, br.Agent)
		}
		return nil
	}
	defer func() { <-claimed }()
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, sr := range submits {
		if sr == nil {
			continue
		}
		answer := func(reply *messages.SubmitReply, err error) {
			errs[i] = settleBatchCall(&out.Calls[i], reply, err)
			wg.Done()
		}
		wg.Add(1)
		// On a goroutine of the handlers, as a single submit runs: its
		// stack has grown already, where a new goroutine's would grow by
		// copying on every call (see reuse).
		c.handlers.Go(func() {
			reply, pending, err := c.submitter.runClaimed(ctx, sr, headers, answer, claimTurn)
			if !pending {
				answer(reply, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// claimBatchTurn claims a batch's turn for its agent before its calls
// do. A turn the coordinator has not seen is most often new: it is
// created with its agent at once, and read only if it exists. A claim
// that fails is left to each call's own claim to report.
func (c *Coordinator) claimBatchTurn(ctx context.Context, turn, agent string) {
	ts := c.submitter.turns
	if ts == nil || turn == "" || agent == "" {
		return
	}
	if _, known := ts.owner(turn); known {
		return
	}
	if err := ts.save(ctx, &turnRecord{state: messages.TurnState{Turn: turn, Agent: agent}}); err == nil {
		ts.remember(turn, agent)
		return
	}
	_ = ts.claimForCall(ctx, turn, agent)
}

// settleBatchCall fills in one call of a batch's reply from its submit's
// outcome, and returns the error that fails the whole batch, if any.
func settleBatchCall(bc *messages.BatchCall, reply *messages.SubmitReply, err error) error {
	if err != nil {
		e := messages.AsError(err)
		switch e.Code {
		case messages.CodeUnavailable, messages.CodeTimeout, messages.CodeInternal, messages.CodeForbidden:
			return err
		}
		bc.Error = e
		return nil
	}
	bc.CallID, bc.State, bc.Duplicate, bc.Approval = reply.CallID, reply.State, reply.Duplicate, reply.Approval
	return nil
}

// results is calls.results: it reads the calls, waits up to the request's
// wait (at most MaxWait) for those queued or running, and renders every
// call as the provider's next input. A call that waits for an approval is
// rendered as such at once; a refused call (the batch's error) as an
// error result.
func (c *Coordinator) results(ctx context.Context, rr *messages.ResultsRequest) (*messages.ResultsReply, error) {
	render, ok := resultRenderers[rr.Format]
	if !ok {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown format %q; use one of %v", rr.Format, toolschema.Formats())
	}
	var ids []string
	seen := map[string]bool{}
	for _, bc := range rr.Calls {
		if bc.CallID != "" && !seen[bc.CallID] {
			seen[bc.CallID] = true
			ids = append(ids, bc.CallID)
		}
	}
	wait := min(time.Duration(rr.WaitMS)*time.Millisecond, c.cfg.MaxWait)
	var watch *resultWatch
	if wait > 0 && len(ids) > 0 {
		// Subscribed before the calls are read, so that a result written
		// after the read cannot slip past the wait.
		var err error
		if watch, err = c.watchResults(ids); err != nil {
			return nil, err
		}
		defer watch.stop()
	}
	snaps := map[string]*ledger.Snapshot{}
	if len(ids) > 0 {
		var err error
		if snaps, err = c.calls.snapshots(ctx, ids...); err != nil {
			return nil, unavailable(err, "read calls")
		}
	}
	for _, s := range snaps {
		if s.Exists() {
			if err := mayReadCall(ctx, s); err != nil {
				return nil, err
			}
		}
	}
	var unfinished []string
	for _, id := range ids {
		if s := snaps[id]; s != nil && s.Exists() && (s.State() == messages.StateQueued || s.State() == messages.StateRunning) {
			unfinished = append(unfinished, id)
		}
	}
	if wait > 0 && len(unfinished) > 0 {
		// A held wait, counted against the user's as calls.get's is.
		release, err := c.waits.hold(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		got := c.awaitResults(ctx, snaps, unfinished, wait, watch)
		var still []string
		for _, id := range unfinished {
			if res := got[id]; res != nil {
				snaps[id].Result = &ledger.Event{CallEvent: messages.CallEvent{CallID: id, Kind: messages.EventResult, Result: res}}
			} else {
				still = append(still, id)
			}
		}
		if len(still) > 0 {
			// Queued calls may have started meanwhile.
			if later, err := c.calls.snapshots(ctx, still...); err == nil {
				maps.Copy(snaps, later)
			}
		}
	}
	out := &messages.ResultsReply{Calls: make([]messages.BatchCall, len(rr.Calls)), Complete: true}
	outcomes := make([]callOutcome, len(rr.Calls))
	for i, bc := range rr.Calls {
		o := callOutcome{call: bc}
		if bc.CallID != "" {
			o.call.Error = nil
			o.observe(snaps[bc.CallID])
		}
		if o.result == nil && o.call.Error == nil {
			out.Complete = false
		}
		outcomes[i], out.Calls[i] = o, o.call
	}
	// Room for the calls twice: a batch sent again with wait_ms replies
	// with its calls beside these results.
	out.Messages = fitMessages(render, outcomes, c.messagesBudget(2*len(marshalJSON(out.Calls))))
	return out, nil
}

// cutToFitNote ends a result cut further so that the reply could carry
// every call's.
const cutToFitNote = "[The result was cut to fit in one reply with the other calls' results; ask calls.results for this call alone to read more of it.]"

// replySlack is room kept in a reply for its headers and encoding.
const replySlack = 8 << 10

// minResultShare is the least each result is cut to when the rendered
// messages do not fit in a reply.
const minResultShare = 256

// messagesBudget is how many bytes of rendered messages a reply can hold
// beside calls bytes of calls: what one message may carry on the
// coordinator's connection (the server's max_payload).
func (c *Coordinator) messagesBudget(calls int) int {
	return int(c.nc.MaxPayload()) - calls - replySlack
}

// fitMessages renders calls as render does and, when the messages would
// be larger than budget bytes, renders them again with each result cut
// as messages.Truncate cuts one to its tool's maximum size (the result
// then says so): first to three quarters of an equal share of budget (a
// medium grows by a third in base64), halved until the messages fit or
// the share is minResultShare.
func fitMessages(render resultRenderer, calls []callOutcome, budget int) []messages.JSON {
	msgs := render(calls)
	withResult := 0
	for i := range calls {
		if calls[i].result != nil {
			withResult++
		}
	}
	if renderedSize(msgs) <= budget || withResult == 0 {
		return msgs
	}
	cut := slices.Clone(calls)
	for share := max(budget*3/4/withResult, minResultShare); ; share /= 2 {
		share = max(share, minResultShare)
		for i := range calls {
			if r := calls[i].result; r != nil {
				smaller, cutNow := messages.Truncate(*r, share, r.FullResult)
				cut[i].result, cut[i].fitted = &smaller, cutNow
			}
		}
		msgs = render(cut)
		if renderedSize(msgs) <= budget || share == minResultShare {
			return msgs
		}
	}
}

func renderedSize(msgs []messages.JSON) int {
	n := 0
	for _, m := range msgs {
		n += len(m)
	}
	return n
}

// resultWatch holds a subscription per call to the writes of its result
// under any namespace: a call's namespace is known only once it is read,
// and the wait counts a write under another one as no result (see
// Ledger.WaitForWrite, which reads the committed result under the call's).
type resultWatch struct {
	writes map[string]chan *nats.Msg
	subs   []*nats.Subscription
	log    *slog.Logger
}

// watchResults subscribes to the result writes of calls.
func (c *Coordinator) watchResults(callIDs []string) (*resultWatch, error) {
	w := &resultWatch{writes: make(map[string]chan *nats.Msg, len(callIDs)), log: c.log}
	for _, id := range callIDs {
		subject, err := c.names.CallKindFilter(id, messages.EventResult)
		if err != nil {
			w.stop()
			return nil, err
		}
		writes := make(chan *nats.Msg, 4)
		sub, err := c.nc.ChanSubscribe(subject, writes)
		if err != nil {
			w.stop()
			return nil, unavailable(err, "subscribe to results")
		}
		w.writes[id], w.subs = writes, append(w.subs, sub)
	}
	return w, nil
}

func (w *resultWatch) stop() {
	for _, sub := range w.subs {
		if err := sub.Unsubscribe(); err != nil {
			w.log.Debug("unsubscribe from result", "subject", sub.Subject, "error", err)
		}
	}
}

// Rereads of a results wait: a result written before the wait's
// subscriptions were made reaches none of them, and the stream may store
// it only after the calls were read, so the calls still unfinished are
// read again, in one batched read, after pauses of 1, 2, 4 … up to
// maxRecheckPause; the wait of each (Ledger.WaitForWrite) looks again
// only every ledger.ResultCheckInterval.
const maxRecheckPause = 128 * time.Millisecond

// awaitResults waits up to wait for the results of calls, on watch's
// subscriptions to their writes and reading them again soon (see
// maxRecheckPause), and returns those that came.
func (c *Coordinator) awaitResults(ctx context.Context, snaps map[string]*ledger.Snapshot, callIDs []string, wait time.Duration, watch *resultWatch) map[string]*messages.CallResult {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	q := c.submitter.queue
	var mu sync.Mutex
	got := make(map[string]*messages.CallResult, len(callIDs))
	stops := make(map[string]context.CancelFunc, len(callIDs))
	var wg sync.WaitGroup
	for _, id := range callIDs {
		ns, bucket := snaps[id].Namespace, snaps[id].Bucket // the call's: only a result under them counts
		writes := watch.writes[id]
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		stops[id] = stop
		wg.Add(1)
		c.handlers.Go(func() {
			defer wg.Done()
			if res, err := q.reads.WaitForWrite(wctx, bucket, ns, id, writes); err == nil {
				mu.Lock()
				got[id] = res
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for pause := time.Millisecond; pause <= maxRecheckPause; pause *= 2 {
		t := time.NewTimer(pause)
		select {
		case <-done:
			t.Stop()
			return got
		case <-t.C:
		}
		mu.Lock()
		var pending []string
		for _, id := range callIDs {
			if got[id] == nil {
				pending = append(pending, id)
			}
		}
		mu.Unlock()
		later, err := c.ledger.Snapshots(ctx, pending...)
		if err != nil {
			continue
		}
		for id, s := range later {
			if s.Namespace != snaps[id].Namespace || s.Result == nil || s.Result.Result == nil {
				continue
			}
			mu.Lock()
			if got[id] == nil {
				got[id] = s.Result.Result
			}
			mu.Unlock()
			stops[id]()
		}
	}
	<-done
	return got
}

// callOutcome is one call of a results request as it is rendered.
type callOutcome struct {
	call messages.BatchCall
	// tool is the Toolbus tool, named for a call the request names by its ID alone.
	tool   string
	result *messages.CallResult
	// fitted is set when the result was cut further to fit in the reply.
	fitted bool
}

// observe takes the call's state from its snapshot.
func (o *callOutcome) observe(s *ledger.Snapshot) {
	if s == nil || !s.Exists() {
		o.call.State = ""
		o.call.Error = messages.Errorf(messages.CodeCallNotFound, "no call %s", o.call.CallID)
		return
	}
	o.call.State, o.call.Approval = s.State(), nil
	if s.Queued != nil && s.Queued.Request != nil {
		o.tool = s.Queued.Request.Tool
	}
	if s.Result != nil && s.Result.Result != nil {
		o.result = s.Result.Result
		o.call.State = o.result.Status
		if o.tool == "" {
			o.tool = o.result.Tool
		}
	} else if o.call.State == messages.StateAwaitingApproval && s.Approval != nil {
		o.call.Approval = s.Approval.Approval
	}
}

// toolCallID is the provider's ID of the call, or its call ID when it has none.
func (o *callOutcome) toolCallID() string {
	if o.call.ToolCallID != "" {
		return o.call.ToolCallID
	}
	return o.call.CallID
}

// name is the tool's name as the model wrote it, or the tool's.
func (o *callOutcome) name() string {
	if o.call.Name != "" {
		return o.call.Name
	}
	return o.tool
}

// view is what the model reads of the call: content blocks, structured
// content, and whether it is an error.
func (o *callOutcome) view() (blocks []messages.ContentBlock, structured messages.JSON, isError bool) {
	switch {
	case o.call.Error != nil:
		return []messages.ContentBlock{messages.TextBlock(refusalText(o.call.Error))}, nil, true
	case o.result != nil:
		r := o.result
		blocks = r.Content
		if len(blocks) == 0 && len(r.StructuredContent) > 0 {
			blocks = []messages.ContentBlock{messages.JSONBlock(r.StructuredContent)}
		}
		if len(blocks) == 0 && r.Error != nil {
			blocks = []messages.ContentBlock{messages.TextBlock(fmt.Sprintf("The call ended %s (%s): %s", r.Status, r.Error.Code, r.Error.Message))}
		}
		switch {
		case o.fitted:
			blocks = append(slices.Clip(blocks), messages.TextBlock(cutToFitNote))
		case r.Truncated:
			blocks = append(slices.Clip(blocks), messages.TextBlock("[The result was cut to the tool's maximum result size.]"))
		}
		return blocks, r.StructuredContent, r.IsError
	case o.call.State == messages.StateAwaitingApproval:
		text := "The call waits for a person's approval"
		if a := o.call.Approval; a != nil {
			text += " (approval ID " + a.ApprovalID + ")"
			if a.Reason != "" {
				text += ": " + a.Reason
			}
		}
		return []messages.ContentBlock{messages.TextBlock(text + ". It has not run; it runs once approved.")}, nil, false
	}
	return []messages.ContentBlock{messages.TextBlock(fmt.Sprintf("The call %s is still %s; its result is not available yet.", o.call.CallID, o.call.State))}, nil, false
}

// refusalText tells the model why its call was refused, with each
// violation of the schema that the message does not quote on a line of
// its own.
func refusalText(e *messages.Error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The call was refused (%s): %s", e.Code, e.Message)
	for _, d := range e.Details {
		if !strings.Contains(e.Message, d) {
			b.WriteString("\n- " + d)
		}
	}
	return b.String()
}

// blockText is a block as text, for a carrier of text; media have none.
func blockText(b messages.ContentBlock) string {
	switch b.Type {
	case messages.ContentText:
		return b.Text
	case messages.ContentJSON:
		return string(b.JSON)
	case messages.ContentResource:
		if b.Text != "" {
			return b.Text
		}
		return fmt.Sprintf("[resource %s (%s, %d bytes)]", b.URI, b.MIMEType, len(b.Data))
	case messages.ContentResourceLink:
		s := "[resource link " + b.URI
		if b.Name != "" {
			s += " " + b.Name
		}
		if b.Description != "" {
			s += ": " + b.Description
		}
		return s + "]"
	}
	return ""
}

func isMedia(b messages.ContentBlock) bool {
	return b.Type == messages.ContentImage || b.Type == messages.ContentAudio
}

// mediaNote stands in the tool result for a media block carried elsewhere,
// or not at all.
func mediaNote(b messages.ContentBlock, carried bool) string {
	if carried {
		return fmt.Sprintf("[%s (%s): in the message after the tool results]", b.Type, b.MIMEType)
	}
	return fmt.Sprintf("[%s (%s, %d bytes): left out, as this provider cannot take it here]", b.Type, b.MIMEType, len(b.Data))
}

// textWithNotes joins the text of the blocks, with a note for each media
// block: carry tells whether the block goes in the following user message.
func textWithNotes(blocks []messages.ContentBlock, carry func(messages.ContentBlock) bool) string {
	var parts []string
	for _, b := range blocks {
		if isMedia(b) {
			parts = append(parts, mediaNote(b, carry(b)))
		} else if t := blockText(b); t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n")
}

// mediaIntro opens a user message's media of one call.
func mediaIntro(o *callOutcome) string {
	return fmt.Sprintf("Media returned by tool call %s (%s):", o.toolCallID(), o.name())
}

func dataURL(b messages.ContentBlock) string {
	return "data:" + b.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(b.Data)
}

// resultRenderer renders calls as the provider's next input.
type resultRenderer func(calls []callOutcome) []messages.JSON

var resultRenderers = map[string]resultRenderer{
	toolschema.OpenAIChat:      renderOpenAIChat,
	toolschema.OpenAIResponses: renderOpenAIResponses,
	toolschema.Anthropic:       renderAnthropic,
	toolschema.Gemini:          renderGemini,
	toolschema.MCP:             renderMCP,
}

// marshalJSON encodes v as compact JSON, without escaping <, > and &.
func marshalJSON(v any) messages.JSON {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only values of the types below are encoded; none fails.
		panic(fmt.Sprintf("encode a rendered message: %v", err))
	}
	return messages.JSON(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// openAIImageTypes are the image types OpenAI's models read.
var openAIImageTypes = []string{"image/png", "image/jpeg", "image/webp", "image/gif"}

type chatPart struct {
	Type       string         `json:"type"`
	Text       string         `json:"text,omitempty"`
	ImageURL   *chatImageURL  `json:"image_url,omitempty"`
	InputAudio *chatAudioData `json:"input_audio,omitempty"`
}

type chatImageURL struct {
	URL string `json:"url"`
}

type chatAudioData struct {
	Data   string `json:"data"`
	Format string `json:"format"`
}

// chatAudioFormat is the input_audio format of an audio type, if Chat Completions takes it.
func chatAudioFormat(mime string) string {
	switch mime {
	case "audio/wav", "audio/x-wav", "audio/wave":
		return "wav"
	case "audio/mpeg", "audio/mp3":
		return "mp3"
	}
	return ""
}

// renderOpenAIChat: a {"role":"tool","tool_call_id","content"} message
// per call, content the result's text. Tool messages carry text only:
// images (PNG, JPEG, WebP, GIF) and WAV or MP3 audio follow in one user
// message after the tool messages, each call's introduced by a text part.
func renderOpenAIChat(calls []callOutcome) []messages.JSON {
	type toolMessage struct {
		Role       string `json:"role"`
		ToolCallID string `json:"tool_call_id"`
		Content    string `json:"content"`
	}
	carry := func(b messages.ContentBlock) bool {
		return slices.Contains(openAIImageTypes, b.MIMEType) || (b.Type == messages.ContentAudio && chatAudioFormat(b.MIMEType) != "")
	}
	var out []messages.JSON
	var media []chatPart
	for i := range calls {
		o := &calls[i]
		blocks, _, isError := o.view()
		text := textWithNotes(blocks, carry)
		if isError && o.call.Error == nil {
			// The format has no flag for an error: the text says it.
			text = "Error: " + text
		}
		out = append(out, marshalJSON(toolMessage{Role: "tool", ToolCallID: o.toolCallID(), Content: text}))
		first := true
		for _, b := range blocks {
			if !isMedia(b) || !carry(b) {
				continue
			}
			if first {
				media = append(media, chatPart{Type: "text", Text: mediaIntro(o)})
				first = false
			}
			if b.Type == messages.ContentImage {
				media = append(media, chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: dataURL(b)}})
			} else {
				media = append(media, chatPart{Type: "input_audio", InputAudio: &chatAudioData{Data: base64.StdEncoding.EncodeToString(b.Data), Format: chatAudioFormat(b.MIMEType)}})
			}
		}
	}
	if len(media) > 0 {
		out = append(out, marshalJSON(struct {
			Role    string     `json:"role"`
			Content []chatPart `json:"content"`
		}{"user", media}))
	}
	return out
}

// renderOpenAIResponses: a {"type":"function_call_output","call_id","output"}
// item per call, output the result's text; images (PNG, JPEG, WebP, GIF)
// follow in one user message item of input_text and input_image parts.
// Audio is not carried: the output notes it.
func renderOpenAIResponses(calls []callOutcome) []messages.JSON {
	type outputItem struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
	type inputPart struct {
		Type     string `json:"type"`
		Text     string `json:"text,omitempty"`
		ImageURL string `json:"image_url,omitempty"`
		Detail   string `json:"detail,omitempty"`
	}
	carry := func(b messages.ContentBlock) bool {
		return b.Type == messages.ContentImage && slices.Contains(openAIImageTypes, b.MIMEType)
	}
	var out []messages.JSON
	var media []inputPart
	for i := range calls {
		o := &calls[i]
		blocks, _, isError := o.view()
		text := textWithNotes(blocks, carry)
		if isError && o.call.Error == nil {
			// The format has no flag for an error: the text says it.
			text = "Error: " + text
		}
		out = append(out, marshalJSON(outputItem{Type: "function_call_output", CallID: o.toolCallID(), Output: text}))
		first := true
		for _, b := range blocks {
			if !isMedia(b) || !carry(b) {
				continue
			}
			if first {
				media = append(media, inputPart{Type: "input_text", Text: mediaIntro(o)})
				first = false
			}
			media = append(media, inputPart{Type: "input_image", ImageURL: dataURL(b), Detail: "auto"})
		}
	}
	if len(media) > 0 {
		out = append(out, marshalJSON(struct {
			Type    string      `json:"type"`
			Role    string      `json:"role"`
			Content []inputPart `json:"content"`
		}{"message", "user", media}))
	}
	return out
}

// anthropicImageTypes are the image types the Messages API takes.
var anthropicImageTypes = openAIImageTypes

// renderAnthropic: one user message whose content is a tool_result block
// per call, {"type":"tool_result","tool_use_id","content","is_error"},
// content text blocks and image blocks (PNG, JPEG, WebP, GIF) in the
// order of the result. Other media, audio among them, are not carried:
// a text block notes them. A result without content has no content.
func renderAnthropic(calls []callOutcome) []messages.JSON {
	type imageSource struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	}
	type block struct {
		Type   string       `json:"type"`
		Text   string       `json:"text,omitempty"`
		Source *imageSource `json:"source,omitempty"`
	}
	type toolResult struct {
		Type      string  `json:"type"`
		ToolUseID string  `json:"tool_use_id"`
		Content   []block `json:"content,omitempty"`
		IsError   bool    `json:"is_error"`
	}
	results := make([]toolResult, 0, len(calls))
	for i := range calls {
		o := &calls[i]
		blocks, _, isError := o.view()
		var content []block
		for _, b := range blocks {
			switch {
			case b.Type == messages.ContentImage && slices.Contains(anthropicImageTypes, b.MIMEType):
				content = append(content, block{Type: "image", Source: &imageSource{Type: "base64", MediaType: b.MIMEType, Data: base64.StdEncoding.EncodeToString(b.Data)}})
			case isMedia(b):
				content = append(content, block{Type: "text", Text: mediaNote(b, false)})
			default:
				// The API refuses empty text blocks.
				if t := blockText(b); t != "" {
					content = append(content, block{Type: "text", Text: t})
				}
			}
		}
		results = append(results, toolResult{Type: "tool_result", ToolUseID: o.toolCallID(), Content: content, IsError: isError})
	}
	return []messages.JSON{marshalJSON(struct {
		Role    string       `json:"role"`
		Content []toolResult `json:"content"`
	}{"user", results})}
}

// geminiMediaTypes are the image and audio types the Gemini API reads as
// inline data, each as it is sent (an alias as the documented type).
var geminiMediaTypes = map[string]string{
	"image/png": "image/png", "image/jpeg": "image/jpeg", "image/webp": "image/webp",
	"image/heic": "image/heic", "image/heif": "image/heif",
	"audio/wav": "audio/wav", "audio/x-wav": "audio/wav", "audio/wave": "audio/wav",
	"audio/mp3": "audio/mp3", "audio/mpeg": "audio/mp3",
	"audio/aiff": "audio/aiff", "audio/aac": "audio/aac", "audio/ogg": "audio/ogg", "audio/flac": "audio/flac",
}

// renderGemini: one user content whose parts are a functionResponse per
// call, {"functionResponse":{"id"?,"name","response"}}: the response is
// {"output": structured content} when the result has it and no media,
// else {"output": text}, or {"error": text} for an error. Images and
// audio of the types Gemini reads (geminiMediaTypes) follow in a second
// user content of inlineData parts, each call's introduced by a text
// part; other media are left out, and the text says so.
func renderGemini(calls []callOutcome) []messages.JSON {
	type functionResponse struct {
		ID       string         `json:"id,omitempty"`
		Name     string         `json:"name"`
		Response map[string]any `json:"response"`
	}
	type inlineData struct {
		MIMEType string `json:"mimeType"`
		Data     string `json:"data"`
	}
	type part struct {
		Text             string            `json:"text,omitempty"`
		InlineData       *inlineData       `json:"inlineData,omitempty"`
		FunctionResponse *functionResponse `json:"functionResponse,omitempty"`
	}
	type content struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	carry := func(b messages.ContentBlock) bool {
		_, ok := geminiMediaTypes[b.MIMEType]
		return ok
	}
	responses := make([]part, 0, len(calls))
	var media []part
	for i := range calls {
		o := &calls[i]
		blocks, structured, isError := o.view()
		hasMedia := slices.ContainsFunc(blocks, isMedia)
		var value any = textWithNotes(blocks, carry)
		if len(structured) > 0 && !hasMedia && !isError {
			value = json.RawMessage(structured)
		}
		key := "output"
		if isError {
			key = "error"
		}
		fr := &functionResponse{Name: o.name(), Response: map[string]any{key: value}}
		if o.call.ToolCallID != "" {
			fr.ID = o.call.ToolCallID
		}
		responses = append(responses, part{FunctionResponse: fr})
		first := true
		for _, b := range blocks {
			if !isMedia(b) || !carry(b) {
				continue
			}
			if first {
				media = append(media, part{Text: mediaIntro(o)})
				first = false
			}
			media = append(media, part{InlineData: &inlineData{MIMEType: geminiMediaTypes[b.MIMEType], Data: base64.StdEncoding.EncodeToString(b.Data)}})
		}
	}
	out := []messages.JSON{marshalJSON(content{Role: "user", Parts: responses})}
	if len(media) > 0 {
		out = append(out, marshalJSON(content{Role: "user", Parts: media}))
	}
	return out
}

// renderMCP: a CallToolResult per call, {"content","structuredContent"?,
// "isError"}, every block carried as MCP has it (a json block as text),
// the structured content as the MCP front carries it (toolschema.ForMCP).
func renderMCP(calls []callOutcome) []messages.JSON {
	type resource struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType,omitempty"`
		Text     string `json:"text,omitempty"`
		Blob     string `json:"blob,omitempty"`
	}
	type block struct {
		Type        string    `json:"type"`
		Text        string    `json:"text,omitempty"`
		Data        string    `json:"data,omitempty"`
		MIMEType    string    `json:"mimeType,omitempty"`
		Resource    *resource `json:"resource,omitempty"`
		URI         string    `json:"uri,omitempty"`
		Name        string    `json:"name,omitempty"`
		Description string    `json:"description,omitempty"`
	}
	type callToolResult struct {
		Content           []block         `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
		IsError           bool            `json:"isError"`
	}
	out := make([]messages.JSON, 0, len(calls))
	for i := range calls {
		blocks, structured, isError := calls[i].view()
		r := callToolResult{Content: []block{}, IsError: isError}
		carried := toolschema.ForMCP(structured, isError, blocks)
		if carried.Content != nil {
			r.StructuredContent = json.RawMessage(carried.Content)
		}
		for _, b := range blocks {
			switch b.Type {
			case messages.ContentImage, messages.ContentAudio:
				r.Content = append(r.Content, block{Type: b.Type, Data: base64.StdEncoding.EncodeToString(b.Data), MIMEType: b.MIMEType})
			case messages.ContentResource:
				res := &resource{URI: b.URI, MIMEType: b.MIMEType, Text: b.Text}
				if b.Text == "" {
					res.Blob = base64.StdEncoding.EncodeToString(b.Data)
				}
				r.Content = append(r.Content, block{Type: b.Type, Resource: res})
			case messages.ContentResourceLink:
				r.Content = append(r.Content, block{Type: b.Type, URI: b.URI, Name: b.Name, Description: b.Description, MIMEType: b.MIMEType})
			default:
				r.Content = append(r.Content, block{Type: "text", Text: blockText(b)})
			}
		}
		if carried.Text != nil {
			r.Content = append(r.Content, block{Type: "text", Text: string(carried.Text)})
		}
		out = append(out, marshalJSON(r))
	}
	return out
}
