package toolformat

import (
	"encoding/base64"
	"encoding/json"
	"slices"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

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

// textResults renders a format whose tool results carry text alone,
// OpenAI's two: a result per call, made by result from the call's ID and
// text, then the media that carry takes in one message made by media,
// each call's introduced by a part made by intro and carried as a part
// made by medium. A medium carry does not take is noted in the text. The
// formats have no flag for an error: the text of a failed result says it.
type textResults[P any] struct {
	carry  func(messages.ContentBlock) bool
	result func(id, text string) any
	intro  func(text string) P
	medium func(messages.ContentBlock) P
	media  func(parts []P) any
}

func (f textResults[P]) render(calls []Outcome) []messages.JSON {
	var out []messages.JSON
	var media []P
	for i := range calls {
		o := &calls[i]
		blocks, _, isError := o.view()
		text := textWithNotes(blocks, f.carry)
		if isError && o.Call.Error == nil {
			text = "Error: " + text
		}
		out = append(out, marshalJSON(f.result(o.toolCallID(), text)))
		first := true
		for _, b := range blocks {
			if !isMedia(b) || !f.carry(b) {
				continue
			}
			if first {
				media = append(media, f.intro(mediaIntro(o)))
				first = false
			}
			media = append(media, f.medium(b))
		}
	}
	if len(media) > 0 {
		out = append(out, marshalJSON(f.media(media)))
	}
	return out
}

// openAIChat: a {"role":"tool","tool_call_id","content"} message per
// call, content the result's text. Tool messages carry text only: images
// (PNG, JPEG, WebP, GIF) and WAV or MP3 audio follow in one user message
// after the tool messages, each call's introduced by a text part.
var openAIChat = textResults[chatPart]{
	carry: func(b messages.ContentBlock) bool {
		return slices.Contains(openAIImageTypes, b.MIMEType) || (b.Type == messages.ContentAudio && chatAudioFormat(b.MIMEType) != "")
	},
	result: func(id, text string) any {
		return struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			Content    string `json:"content"`
		}{"tool", id, text}
	},
	intro: func(text string) chatPart { return chatPart{Type: "text", Text: text} },
	medium: func(b messages.ContentBlock) chatPart {
		if b.Type == messages.ContentImage {
			return chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: dataURL(b)}}
		}
		return chatPart{Type: "input_audio", InputAudio: &chatAudioData{Data: base64.StdEncoding.EncodeToString(b.Data), Format: chatAudioFormat(b.MIMEType)}}
	},
	media: func(parts []chatPart) any {
		return struct {
			Role    string     `json:"role"`
			Content []chatPart `json:"content"`
		}{"user", parts}
	},
}

// responsesPart is a part of an OpenAI Responses input message.
type responsesPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL string `json:"image_url,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// openAIResponses: a {"type":"function_call_output","call_id","output"}
// item per call, output the result's text; images (PNG, JPEG, WebP, GIF)
// follow in one user message item of input_text and input_image parts.
// Audio is not carried: the output notes it.
var openAIResponses = textResults[responsesPart]{
	carry: func(b messages.ContentBlock) bool {
		return b.Type == messages.ContentImage && slices.Contains(openAIImageTypes, b.MIMEType)
	},
	result: func(id, text string) any {
		return struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Output string `json:"output"`
		}{"function_call_output", id, text}
	},
	intro: func(text string) responsesPart { return responsesPart{Type: "input_text", Text: text} },
	medium: func(b messages.ContentBlock) responsesPart {
		return responsesPart{Type: "input_image", ImageURL: dataURL(b), Detail: "auto"}
	},
	media: func(parts []responsesPart) any {
		return struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content []responsesPart `json:"content"`
		}{"message", "user", parts}
	},
}

// anthropicImageTypes are the image types the Messages API takes.
var anthropicImageTypes = openAIImageTypes

// renderAnthropic: one user message whose content is a tool_result block
// per call, {"type":"tool_result","tool_use_id","content","is_error"},
// content text blocks and image blocks (PNG, JPEG, WebP, GIF) in the
// order of the result. Other media, audio among them, are not carried:
// a text block notes them. A result without content has no content.
func renderAnthropic(calls []Outcome) []messages.JSON {
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
func renderGemini(calls []Outcome) []messages.JSON {
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
		if o.Call.ToolCallID != "" {
			fr.ID = o.Call.ToolCallID
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
func renderMCP(calls []Outcome) []messages.JSON {
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
