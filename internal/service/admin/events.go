package admin

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// eventView is one line of a call's timeline.
type eventView struct {
	Event *messages.CallEvent
	State messages.CallState
	// Progress is set on progress events: what the page's bar shows.
	Progress *messages.Progress
}

// callEvents streams a call's events as server-sent events, each an HTML
// line of the timeline (event "ev"), the result's blocks (event "result")
// and, after the result, "end". An event's id is its place in the call's
// timeline: a browser that reconnects sends the last it has
// (Last-Event-ID) and gets only the ones after it.
func (c *Console) callEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := messages.ValidateID("call ID", id); err != nil {
		http.Error(w, describe(err), http.StatusBadRequest)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	if c.streams.Add(1) > int64(c.cfg.MaxStreams) {
		c.streams.Add(-1)
		w.Header().Set("Retry-After", "5")
		http.Error(w, "Too many live timelines are open; try again shortly", http.StatusServiceUnavailable)
		return
	}
	defer c.streams.Add(-1)
	after, _ := strconv.Atoi(r.Header.Get("Last-Event-ID"))
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.StreamLifetime)
	defer cancel()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	flusher.Flush()

	n := 0
	for ev, err := range c.cfg.Client.Watch(ctx, id) {
		if err != nil {
			if ctx.Err() == nil {
				c.send(w, "failure", 0, "Following the call failed: "+describe(err))
				flusher.Flush()
			}
			return
		}
		n++
		if n <= after {
			if ev.Kind == messages.EventResult {
				// The browser has the whole timeline: it only missed the end.
				c.send(w, "end", n, "")
				flusher.Flush()
				return
			}
			continue
		}
		view := eventView{Event: ev, State: stateAfter(ev)}
		if ev.Kind == messages.EventProgress {
			view.Progress = ev.Progress
		}
		if !c.sendTemplate(w, "ev", n, "event", view) {
			return
		}
		if ev.Kind == messages.EventResult && ev.Result != nil {
			c.sendTemplate(w, "result", n, "result", ev.Result)
			c.send(w, "end", n, "")
			flusher.Flush()
			return
		}
		flusher.Flush()
	}
}

// sendTemplate renders a fragment of the call page and sends it as one
// event.
func (c *Console) sendTemplate(w http.ResponseWriter, event string, id int, name string, data any) bool {
	var buf bytes.Buffer
	if err := c.pages["call"].ExecuteTemplate(&buf, name, data); err != nil {
		c.cfg.Logger.Error("render", "fragment", name, "err", err)
		return false
	}
	c.send(w, event, id, buf.String())
	return true
}

// send writes one server-sent event; each line of data becomes a data
// field, so that no line of it can end the event early.
func (c *Console) send(w http.ResponseWriter, event string, id int, data string) {
	var b strings.Builder
	b.WriteString("event: " + event + "\n")
	if id > 0 {
		b.WriteString("id: " + strconv.Itoa(id) + "\n")
	}
	for line := range strings.SplitSeq(strings.ReplaceAll(data, "\r", ""), "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	_, _ = w.Write([]byte(b.String()))
}
