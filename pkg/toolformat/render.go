package toolformat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// Renderer renders calls as a provider's next input: the messages (or
// items, or contents) to append to the conversation after the model's
// message, one result for each call in their order.
type Renderer func(calls []Outcome) []messages.JSON

var renderers = map[string]Renderer{
	toolschema.OpenAIChat:      openAIChat.render,
	toolschema.OpenAIResponses: openAIResponses.render,
	toolschema.Anthropic:       renderAnthropic,
	toolschema.Gemini:          renderGemini,
	toolschema.MCP:             renderMCP,
}

// RendererOf is the Renderer of format (a toolschema format name), and
// whether there is one.
func RendererOf(format string) (Renderer, bool) {
	r, ok := renderers[format]
	return r, ok
}

// Render renders calls as format's next input (see Renderer). An unknown
// format, or a result whose structured content is not JSON, is an error
// of code bad_request.
func Render(format string, calls []Outcome) ([]messages.JSON, error) {
	r, ok := renderers[format]
	if !ok {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown format %q; use one of %v", format, toolschema.Formats())
	}
	for i := range calls {
		if res := calls[i].Result; res != nil && len(res.StructuredContent) > 0 && !json.Valid(res.StructuredContent) {
			return nil, messages.Errorf(messages.CodeBadRequest, "the structured content of the result of tool call %s is not JSON", calls[i].toolCallID())
		}
	}
	return r(calls), nil
}

// Outcome is one call as it is rendered: the call as a batch's reply
// lists it, and its result once it has one.
type Outcome struct {
	// Call is the call: its provider's tool-call ID and name, its call ID
	// and state, its refusal (Error) or the approval it waits for.
	Call messages.BatchCall
	// Tool is the Toolbus tool, for a call whose Call has no Name (one
	// named by its call ID alone).
	Tool string
	// Result is the call's result; nil while it has none.
	Result *messages.CallResult
	// Fitted is set when Result was cut further to fit in one reply with
	// the other calls' results (see Fit): the result then says so.
	Fitted bool
}

// Outcome is the outcome of running c, as a Go agent that runs it
// itself (client.Call) has it: its result, or the error that refused it,
// rendered as a refusal of the error's code. A call read refused already
// is rendered as its refusal whatever res and err are.
func (c Call) Outcome(res *messages.CallResult, err error) Outcome {
	o := Outcome{Call: messages.BatchCall{ToolCallID: c.ID, Name: c.Name, Error: c.Refused}}
	switch {
	case c.Refused != nil:
	case err != nil:
		o.Call.Error = messages.AsError(err)
	case res != nil:
		o.Call.CallID, o.Call.State, o.Result = res.CallID, res.Status, res
	}
	return o
}

// toolCallID is the provider's ID of the call, or its call ID when it has none.
func (o *Outcome) toolCallID() string {
	if o.Call.ToolCallID != "" {
		return o.Call.ToolCallID
	}
	return o.Call.CallID
}

// name is the tool's name as the model wrote it, or the tool's.
func (o *Outcome) name() string {
	if o.Call.Name != "" {
		return o.Call.Name
	}
	return o.Tool
}

// view is what the model reads of the call: content blocks, structured
// content, and whether it is an error.
func (o *Outcome) view() (blocks []messages.ContentBlock, structured messages.JSON, isError bool) {
	switch {
	case o.Call.Error != nil:
		return []messages.ContentBlock{messages.TextBlock(refusalText(o.Call.Error))}, nil, true
	case o.Result != nil:
		r := o.Result
		blocks = r.Content
		if len(blocks) == 0 && len(r.StructuredContent) > 0 {
			blocks = []messages.ContentBlock{messages.JSONBlock(r.StructuredContent)}
		}
		if len(blocks) == 0 && r.Error != nil {
			blocks = []messages.ContentBlock{messages.TextBlock(fmt.Sprintf("The call ended %s (%s): %s", r.Status, r.Error.Code, r.Error.Message))}
		}
		switch {
		case o.Fitted:
			blocks = append(slices.Clip(blocks), messages.TextBlock(CutToFitNote))
		case r.Truncated:
			blocks = append(slices.Clip(blocks), messages.TextBlock("[The result was cut to the tool's maximum result size.]"))
		}
		structured = r.StructuredContent
		if !json.Valid(structured) {
			// Render refuses it; a Renderer renders the result without it.
			structured = nil
		}
		return blocks, structured, r.IsError
	case o.Call.State == messages.StateAwaitingApproval:
		text := "The call waits for a person's approval"
		if a := o.Call.Approval; a != nil {
			text += " (approval ID " + a.ApprovalID + ")"
			if a.Reason != "" {
				text += ": " + a.Reason
			}
		}
		return []messages.ContentBlock{messages.TextBlock(text + ". It has not run; it runs once approved.")}, nil, false
	}
	return []messages.ContentBlock{messages.TextBlock(fmt.Sprintf("The call %s is still %s; its result is not available yet.", o.Call.CallID, o.Call.State))}, nil, false
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
		return string(toolschema.BlockJSON(b))
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
func mediaIntro(o *Outcome) string {
	return fmt.Sprintf("Media returned by tool call %s (%s):", o.toolCallID(), o.name())
}

func dataURL(b messages.ContentBlock) string {
	return "data:" + b.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(b.Data)
}

// CutToFitNote ends a result that Fit cut further so that the messages
// could carry every call's.
const CutToFitNote = "[The result was cut to fit in one reply with the other calls' results; ask calls.results for this call alone to read more of it.]"

// minResultShare is the least each result is cut to when the rendered
// messages do not fit in a reply.
const minResultShare = 256

// Fit renders calls as render does and, when the messages would be
// larger than budget bytes, renders them again with each result cut
// as messages.Truncate cuts one to its tool's maximum size (the result
// then says so, and CutToFitNote ends it): first to three quarters of an
// equal share of budget (a medium grows by a third in base64), halved
// until the messages fit or the share is 256 bytes (minResultShare).
// Refusals and calls without a result are not cut.
func Fit(render Renderer, calls []Outcome, budget int) []messages.JSON {
	msgs := render(calls)
	withResult := 0
	for i := range calls {
		if calls[i].Result != nil {
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
			if r := calls[i].Result; r != nil {
				smaller, cutNow := messages.Truncate(*r, share, r.FullResult)
				cut[i].Result, cut[i].Fitted = &smaller, cutNow
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

// marshalJSON encodes v as compact JSON, without escaping <, > and &.
func marshalJSON(v any) messages.JSON {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only the renderers' types are encoded, whose JSON is checked
		// (view); none fails.
		panic(fmt.Sprintf("encode a rendered message: %v", err))
	}
	return messages.JSON(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}
