package toolformat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// Call is one tool call read from a provider's response.
type Call struct {
	// ID is the provider's tool-call ID; empty when the call has none
	// (Gemini's may have none, an MCP params object has none).
	ID   string
	Name string
	// Arguments are the call's arguments as a JSON object; {} when the
	// model gave none.
	Arguments messages.JSON
	// Refused is why the call cannot be run as it stands (its arguments
	// are not a JSON object, its ID or name is unusable, its ID appears
	// twice); it is answered as the call's error, and Arguments may then
	// be anything.
	Refused *messages.Error
}

// reader reads the tool calls of one format from the JSON an
// agent has: the calls, or the message or response that holds them. It
// returns the response ID when the JSON carries one.
type reader func(raw json.RawMessage) (calls []Call, responseID string, err error)

var readers = map[string]reader{
	toolschema.OpenAIChat:      readOpenAIChatCalls,
	toolschema.OpenAIResponses: readOpenAIResponsesCalls,
	toolschema.Anthropic:       readAnthropicCalls,
	toolschema.Gemini:          readGeminiCalls,
	toolschema.MCP:             readMCPCalls,
}

// Read reads the tool calls of format (a toolschema format name) from
// raw: the calls as the provider lists them, or the message or response
// that holds them (see docs/protocol.md, calls.submit_batch). It returns
// the response's ID when raw carries one.
//
// A batch holds at least one call and at most messages.MaxBatchCalls.
// JSON that is not the format's, or holds no call or too many, is an
// error of code bad_request naming what was wrong. A call that cannot
// run as it stands (arguments that are not an object, an ID that is not
// usable or appears twice, a name longer than
// messages.MaxToolCallNameLength) is read with Refused set, so that the
// model gets an answer for each of its calls. IDs and names are cut to
// their bounds, as valid UTF-8, so that a reply can repeat them.
func Read(format string, raw messages.JSON) ([]Call, string, error) {
	read, ok := readers[format]
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
		if len(tc.Name) > messages.MaxToolCallNameLength && tc.Refused == nil {
			tc.Refused = messages.Errorf(messages.CodeInvalidName, "the tool name is %d bytes; at most %d", len(tc.Name), messages.MaxToolCallNameLength)
		}
		// The reply repeats the ID and name: cut to their bounds, so that
		// a hostile batch cannot make its reply too large to send, and
		// calls.results takes the reply as it comes.
		tc.Name = repeatable(tc.Name, messages.MaxToolCallNameLength)
		if tc.ID == "" {
			continue
		}
		if tc.Refused == nil {
			if err := messages.ValidateToolCallID(tc.ID); err != nil {
				tc.Refused = messages.AsError(err)
			}
		}
		tc.ID = repeatable(tc.ID, messages.MaxToolCallIDLength)
		// A call refused for another reason still holds its ID: the model
		// gets one result per ID.
		if seen[tc.ID] && tc.Refused == nil {
			tc.Refused = messages.Errorf(messages.CodeBadRequest, "tool-call ID %s appears twice in the batch", tc.ID)
		}
		seen[tc.ID] = true
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
func readOpenAIChatCalls(raw json.RawMessage) ([]Call, string, error) {
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
	calls := make([]Call, 0, len(items))
	for _, it := range items {
		tc := Call{ID: it.ID, Name: it.Function.Name}
		if it.Type != "" && it.Type != "function" {
			tc.Refused = messages.Errorf(messages.CodeBadRequest, "tool call of type %q: Toolbus runs function calls", it.Type)
		}
		tc.Arguments, tc.Refused = stringArguments(it.Function.Name, it.Function.Arguments, tc.Refused)
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
func readOpenAIResponsesCalls(raw json.RawMessage) ([]Call, string, error) {
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
	var calls []Call
	for _, it := range items {
		if it.Type != "function_call" {
			continue
		}
		tc := Call{ID: it.CallID, Name: it.Name}
		tc.Arguments, tc.Refused = stringArguments(it.Name, it.Arguments, nil)
		calls = append(calls, tc)
	}
	return calls, responseID, nil
}

// Anthropic Messages: the tool_use blocks of the assistant's content,
// {"type":"tool_use","id","name","input"}; other blocks (text, thinking,
// server tools) are passed over. Taken from the blocks or the message.
func readAnthropicCalls(raw json.RawMessage) ([]Call, string, error) {
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
	var calls []Call
	for _, b := range blocks {
		if b.Type != "tool_use" {
			continue
		}
		calls = append(calls, objectCall(b.ID, b.Name, b.Input))
	}
	return calls, responseID, nil
}

// objectCall is a call whose arguments must be a JSON object (or absent).
func objectCall(id, name string, args json.RawMessage) Call {
	tc := Call{ID: id, Name: name, Arguments: argumentsOf(args)}
	if t := bytes.TrimSpace(tc.Arguments); len(t) == 0 || t[0] != '{' {
		tc.Refused = messages.Errorf(messages.CodeInvalidArguments, "arguments of %s are not a JSON object", name)
	}
	return tc
}

// Gemini: the functionCall parts of a candidate's content,
// {"functionCall":{"id"?,"name","args"}}; other parts are passed over.
// Taken from the parts, the content, or the GenerateContentResponse (its
// first candidate, and its responseId).
func readGeminiCalls(raw json.RawMessage) ([]Call, string, error) {
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
	var calls []Call
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
func readMCPCalls(raw json.RawMessage) ([]Call, string, error) {
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
	var calls []Call
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
		if tc.ID, err = jsonRPCID(it.ID); err != nil {
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
