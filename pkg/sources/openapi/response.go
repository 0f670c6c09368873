package openapi

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// toResult maps a response to a call's result; uri is the request's URL as
// shown (Source.shown), which names a resource block.
func toResult(resp *http.Response, body []byte, uri string) *worker.Result {
	mediaType, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		mediaType = ""
	}
	status := fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if !ok {
		structured := map[string]any{"status": resp.StatusCode}
		text := "HTTP " + status
		if len(body) > 0 {
			text += ": " + strings.ToValidUTF8(string(body), "\uFFFD")
			if isJSON(mediaType) && json.Valid(body) {
				structured["body"] = json.RawMessage(body)
			} else {
				structured["body"] = strings.ToValidUTF8(string(body), "\uFFFD")
			}
		}
		data, _ := json.Marshal(structured)
		return &worker.Result{IsError: true, Content: []messages.ContentBlock{messages.TextBlock(text)}, StructuredContent: data}
	}
	switch {
	case len(body) == 0:
		return worker.Text("HTTP " + status)
	case isJSON(mediaType) && json.Valid(body):
		return &worker.Result{Content: []messages.ContentBlock{messages.JSONBlock(body)}, StructuredContent: body}
	case strings.HasPrefix(mediaType, "image/"):
		return &worker.Result{Content: []messages.ContentBlock{messages.ImageBlock(body, mediaType)}}
	case strings.HasPrefix(mediaType, "audio/"):
		return &worker.Result{Content: []messages.ContentBlock{{Type: messages.ContentAudio, Data: body, MIMEType: mediaType}}}
	case isText(mediaType, body):
		return worker.Text(string(body))
	}
	return &worker.Result{Content: []messages.ContentBlock{{Type: messages.ContentResource, URI: uri, MIMEType: mediaType, Data: body}}}
}

// isText reports whether a body is text: a text/* type, XML, JSON that did
// not parse, or an untyped body that is valid UTF-8.
func isText(mediaType string, body []byte) bool {
	switch {
	case strings.HasPrefix(mediaType, "text/"), isJSON(mediaType),
		mediaType == "application/xml", strings.HasSuffix(mediaType, "+xml"),
		mediaType == "application/x-www-form-urlencoded", mediaType == "application/yaml":
		return true
	case mediaType == "", mediaType == "application/octet-stream":
		return utf8.Valid(body) && !strings.ContainsRune(string(body), 0)
	}
	return false
}
