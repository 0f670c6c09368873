package admin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// maxShownJSON bounds the JSON (schemas, arguments, structured results)
// a page shows of one value; the rest is cut with a marker.
const maxShownJSON = 64 << 10

// maxInlineImage bounds the image bytes shown inline in a result.
const maxInlineImage = 2 << 20

// inlineImageTypes are the image types shown inline. SVG is not among
// them: it is a document, not a picture.
var inlineImageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

var templateFuncs = template.FuncMap{
	"json":    prettyJSON,
	"time":    formatTime,
	"ago":     ago,
	"ms":      func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() },
	"image":   imageURL,
	"join":    strings.Join,
	"joinKV":  joinKV,
	"hasItem": func(list []string, s string) bool { return contains(list, s) },
	"idParts": idParts,
	"hhmm":    func(t time.Time) string { return t.UTC().Format("15:04") },
	"f1":      func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
}

// idShown is how many characters of an ID a table shows at each end: a
// call ID starts with its client's route, the same for all of the
// client's calls, so its end tells calls apart.
const idShown = 5

// shortID is an ID as a table shows it: Head and Tail drawn, Middle in
// the page but hidden by the style sheet, behind an ellipsis.
type shortID struct {
	Whole, Head, Middle, Tail string
}

// idParts splits an ID for a table; an ID short enough is all Head.
func idParts(id string) shortID {
	r := []rune(id)
	if len(r) <= 2*idShown+2 {
		return shortID{Whole: id, Head: id}
	}
	return shortID{Whole: id, Head: string(r[:idShown]), Middle: string(r[idShown : len(r)-idShown]), Tail: string(r[len(r)-idShown:])}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// prettyJSON indents a JSON value for a <pre>, cut at maxShownJSON.
func prettyJSON(v messages.JSON) string {
	if len(v) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, v, "", "  "); err != nil {
		buf.Reset()
		buf.Write(v)
	}
	if buf.Len() > maxShownJSON {
		return buf.String()[:maxShownJSON] + "\n… (cut at 64 KiB)"
	}
	return buf.String()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func joinKV(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ", ")
}

// imageURL returns a data URL of an image block the page may show inline:
// one of inlineImageTypes, at most maxInlineImage bytes. Anything else
// returns "", and the page names the block instead.
func imageURL(b messages.ContentBlock) template.URL {
	if !inlineImageTypes[strings.ToLower(b.MIMEType)] || len(b.Data) == 0 || len(b.Data) > maxInlineImage {
		return ""
	}
	// Typed as a URL for html/template, which would otherwise refuse a
	// data: URL; the MIME type is one of four fixed strings and the data
	// base64, so nothing of the tool's reaches the URL unescaped.
	return template.URL("data:" + strings.ToLower(b.MIMEType) + ";base64," + base64.StdEncoding.EncodeToString(b.Data))
}

// stateAfter is the call's state once the event happened, or "" when the
// event does not change it.
func stateAfter(ev *messages.CallEvent) messages.CallState {
	switch ev.Kind {
	case messages.EventQueued:
		return messages.StateQueued
	case messages.EventStarted:
		return messages.StateRunning
	case messages.EventApproval:
		if ev.Approval == nil {
			return ""
		}
		switch ev.Approval.State {
		case messages.ApprovalPending:
			return messages.StateAwaitingApproval
		case messages.ApprovalApproved:
			return messages.StateQueued
		}
	case messages.EventResult:
		if ev.Result != nil {
			return ev.Result.Status
		}
	}
	return ""
}
