package admin

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus/pkg/messages"
)

type catalogView struct {
	Namespaces []namespaceView
	// WorkersUnknown says why the workers' slots could not be read.
	WorkersUnknown string
}

type namespaceView struct {
	Name    string
	Tools   []toolView
	Workers []workerView
	// Busy and Slots add up the live workers' slots.
	Busy, Slots int
}

type toolView struct {
	messages.ToolEntry
	// ID is the tool's name made safe for an HTML id.
	ID string
}

type workerView struct {
	messages.WorkerHeartbeat
	Down string
}

func (c *Console) catalogPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	data := pageData{Title: "Catalog", Section: "catalog"}
	reply, err := c.cfg.Client.ListTools(ctx, messages.ListToolsRequest{})
	if err != nil {
		data.Error = "Listing the tools failed: " + describe(err)
		c.render(w, r, http.StatusBadGateway, "catalog", data)
		return
	}
	byNS := map[string]*namespaceView{}
	ns := func(name string) *namespaceView {
		if v, ok := byNS[name]; ok {
			return v
		}
		v := &namespaceView{Name: name}
		byNS[name] = v
		return v
	}
	for _, t := range reply.Tools {
		v := ns(t.Namespace)
		v.Tools = append(v.Tools, toolView{ToolEntry: t, ID: "tool-" + t.Name})
	}
	view := catalogView{}
	workers, notice := c.liveWorkers(ctx)
	view.WorkersUnknown = notice
	for _, hb := range workers {
		v := ns(hb.Namespace)
		wv := workerView{WorkerHeartbeat: hb}
		for _, d := range hb.Down {
			wv.Down += d.Source + ": " + d.Reason + "; "
		}
		v.Workers = append(v.Workers, wv)
		v.Busy += hb.Busy
		v.Slots += hb.Slots
	}
	for _, v := range byNS {
		view.Namespaces = append(view.Namespaces, *v)
	}
	slices.SortFunc(view.Namespaces, func(a, b namespaceView) int { return cmp.Compare(a.Name, b.Name) })
	data.Page = view
	c.render(w, r, http.StatusOK, "catalog", data)
}

// liveWorkers lists the workers alive now, with their slots
// (workers.list, which needs an operator's rights), and a notice for the
// page when the list is missing or incomplete.
func (c *Console) liveWorkers(ctx context.Context) ([]messages.WorkerHeartbeat, string) {
	reply, err := c.cfg.Client.Operator().ListWorkers(ctx, "")
	if err != nil {
		return nil, "Listing the workers failed, so their slots are not shown: " + describe(err)
	}
	slices.SortFunc(reply.Workers, func(a, b messages.WorkerHeartbeat) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.WorkerID, b.WorkerID))
	})
	if reply.Truncated {
		return reply.Workers, fmt.Sprintf("More than %d workers are alive: the first %d are shown.", messages.MaxWorkersListed, len(reply.Workers))
	}
	return reply.Workers, ""
}

// maxReasonLength bounds the reasons an operator types, in bytes.
const maxReasonLength = 500

// reason is the form's reason, cut to maxReasonLength on a character's
// boundary: the coordinator refuses a reason that is not UTF-8.
func reason(r *http.Request) string {
	s := strings.TrimSpace(r.PostFormValue("reason"))
	if len(s) > maxReasonLength {
		cut := maxReasonLength
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// byOperator notes in a reason which console operator acted: the bus
// knows the console's NATS user, not the person logged in.
func byOperator(ses *session, why string) string {
	if why == "" {
		return "by " + ses.operator + " in the console"
	}
	return why + " (by " + ses.operator + " in the console)"
}

func (c *Console) switchTool(w http.ResponseWriter, r *http.Request) {
	ses := sessionOf(r.Context())
	if !c.access.checkPost(w, r, ses) {
		return
	}
	name := r.PostFormValue("name")
	enable := r.PostFormValue("enable") == "true"
	why := reason(r)
	if !enable && why == "" {
		c.redirect(w, r, "/catalog", "Give a reason to disable "+name+".")
		return
	}
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	if err := c.cfg.Client.Operator().SetToolEnabled(ctx, name, enable, byOperator(ses, why)); err != nil {
		c.redirect(w, r, "/catalog", "Switching "+name+" failed: "+describe(err))
		return
	}
	c.cfg.Logger.Info("console switched a tool", "operator", ses.operator, "name", name, "enabled", enable, "reason", why)
	c.awaitSwitch(ctx, name, enable)
	verb := "disabled"
	if enable {
		verb = "enabled"
	}
	c.redirect(w, r, "/catalog", name+" "+verb+".")
}

// switchShownWithin bounds how long a switch waits for the catalog the
// coordinators list to show it, so that the page it leads to does.
const switchShownWithin = 2 * time.Second

// awaitSwitch waits, at most switchShownWithin, until tools.list shows the
// tool or namespace switched: coordinators learn of a switch through their
// watch of the catalog, a moment after it is written.
func (c *Console) awaitSwitch(ctx context.Context, name string, enabled bool) {
	ctx, cancel := context.WithTimeout(ctx, switchShownWithin)
	defer cancel()
	req := messages.ListToolsRequest{}
	if messages.ValidateNamespace(name) == nil {
		req.Namespace = name
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		reply, err := c.cfg.Client.ListTools(ctx, req)
		if err == nil && switched(reply.Tools, name, enabled) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// switched reports whether every tool of the list that name names (the
// tool, or each tool of the namespace) is enabled or disabled as asked.
func switched(tools []messages.ToolEntry, name string, enabled bool) bool {
	for _, t := range tools {
		if (t.Name == name || t.Namespace == name) && t.Disabled == enabled {
			return false
		}
	}
	return true
}

type callsView struct {
	Filter  messages.CallsListRequest
	States  []string
	Since   string
	Until   string
	Calls   []messages.CallLogEntry
	Next    string
	Refresh string
	Error   string
}

// allStates lists the states the log's filter offers.
var allStates = []messages.CallState{
	messages.StateQueued, messages.StateAwaitingApproval, messages.StateRunning, messages.StateCompleted,
	messages.StateFailed, messages.StateCancelled, messages.StateTimedOut, messages.StateDenied,
}

// timeLayout is how the log's time filters are written (a datetime-local input).
const timeLayout = "2006-01-02T15:04"

func (c *Console) callsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	view := callsView{Filter: messages.CallsListRequest{
		Agent: q.Get("agent"), Turn: q.Get("turn"), Tool: q.Get("tool"), Namespace: q.Get("namespace"), Cursor: q.Get("cursor"),
	}}
	for _, s := range q["state"] {
		if slices.Contains(allStates, messages.CallState(s)) {
			view.Filter.States = append(view.Filter.States, messages.CallState(s))
			view.States = append(view.States, s)
		}
	}
	if msg := timeRange(q, &view.Filter.Since, &view.Filter.Until, &view.Since, &view.Until); msg != "" {
		view.Error = msg
	}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil {
		view.Filter.Limit = min(max(n, 1), messages.MaxCallsListLimit)
	}
	if view.Error == "" {
		ctx, cancel := c.busContext(r.Context())
		defer cancel()
		reply, err := c.cfg.Client.ListCalls(ctx, view.Filter)
		if err != nil {
			view.Error = "Listing the calls failed: " + describe(err)
		} else {
			view.Calls = reply.Calls
			if reply.NextCursor != "" {
				next := r.URL.Query()
				next.Set("cursor", reply.NextCursor)
				next.Del("partial")
				view.Next = "/calls?" + next.Encode()
			}
		}
	}
	if view.Filter.Cursor == "" {
		// The first page follows new calls: the script reloads its rows.
		refresh := r.URL.Query()
		refresh.Set("partial", "1")
		view.Refresh = "/calls?" + refresh.Encode()
	}
	if q.Get("partial") == "1" {
		c.fragment(w, "calls", "calls-rows", view)
		return
	}
	c.render(w, r, http.StatusOK, "calls", pageData{Title: "Execution log", Section: "calls", Page: struct {
		callsView
		AllStates []messages.CallState
	}{view, allStates}})
}

type callView struct {
	Info   *messages.CallInfo
	Events string
	// TraceID is the call's trace; TraceURL links it in the tracing UI.
	TraceID  string
	TraceURL string
	Ended    bool
	Progress progressView
}

// progressView is a call's progress bar: Value in [0, 1], or -1 for a bar
// that shows work under way of unknown extent.
type progressView struct {
	Value float64
	Text  string
}

// progressOf is the bar of a call: full once it completed, whatever its
// tool last reported (a tool that reports none, or whose last report
// was not its end); the last fraction reported otherwise; of unknown
// extent while it runs without one.
func progressOf(info *messages.CallInfo) progressView {
	var v progressView
	if p := info.Progress; p != nil {
		v.Text = strconv.FormatFloat(p.Progress, 'f', -1, 64)
		if p.Total > 0 {
			v.Text += " of " + strconv.FormatFloat(p.Total, 'f', -1, 64)
		}
		if p.Message != "" {
			v.Text += ": " + p.Message
		}
		v.Value = p.Fraction()
	}
	switch {
	case info.State == messages.StateCompleted:
		return progressView{Value: 1, Text: "complete"}
	case v.Value < 0 && info.State != messages.StateRunning:
		v.Value = 0
	case info.Progress == nil && info.State == messages.StateRunning:
		v.Value = -1
	}
	return v
}

func (c *Console) callPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	data := pageData{Title: "Call " + id, Section: "calls"}
	if err := messages.ValidateID("call ID", id); err != nil {
		data.Error = describe(err)
		c.render(w, r, http.StatusBadRequest, "call", data)
		return
	}
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	info, err := c.cfg.Client.GetTraced(ctx, id)
	if err != nil {
		data.Error = "Reading the call failed: " + describe(err)
		status := http.StatusBadGateway
		if messages.CodeOf(err) == messages.CodeCallNotFound {
			status = http.StatusNotFound
		}
		c.render(w, r, status, "call", data)
		return
	}
	view := callView{Info: info, Events: "/calls/" + url.PathEscape(id) + "/events", Ended: info.State.Terminal(), Progress: progressOf(info)}
	view.TraceID = info.TraceID
	if view.TraceID != "" && c.cfg.TraceURL != "" {
		view.TraceURL = strings.ReplaceAll(c.cfg.TraceURL, "{trace_id}", view.TraceID)
	}
	data.Page = view
	c.render(w, r, http.StatusOK, "call", data)
}

func (c *Console) cancelCall(w http.ResponseWriter, r *http.Request) {
	ses := sessionOf(r.Context())
	if !c.access.checkPost(w, r, ses) {
		return
	}
	id := r.PathValue("id")
	page := "/calls/" + url.PathEscape(id)
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	reply, err := c.cfg.Client.Cancel(ctx, id, byOperator(ses, reason(r)))
	if err != nil {
		c.redirect(w, r, page, "Cancelling failed: "+describe(err))
		return
	}
	c.cfg.Logger.Info("console cancelled a call", "operator", ses.operator, "call_id", id, "outcome", reply.Outcome)
	notice := "Cancel requested."
	if reply.Outcome == messages.CancelTooLate {
		notice = "The call had already ended."
	}
	c.redirect(w, r, page, notice)
}

type approvalsView struct {
	Approvals []messages.Approval
}

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	data := pageData{Title: "Approvals", Section: "approvals"}
	reply, err := c.cfg.Client.ListApprovals(ctx, messages.ListApprovalsRequest{State: messages.ApprovalPending})
	if err != nil {
		data.Error = "Listing the approvals failed: " + describe(err)
		c.render(w, r, http.StatusBadGateway, "approvals", data)
		return
	}
	data.Page = approvalsView{Approvals: reply.Approvals}
	c.render(w, r, http.StatusOK, "approvals", data)
}

func (c *Console) decide(w http.ResponseWriter, r *http.Request) {
	ses := sessionOf(r.Context())
	if !c.access.checkPost(w, r, ses) {
		return
	}
	id := r.PathValue("id")
	decision := r.PostFormValue("decision")
	remember := r.PostFormValue("remember")
	if decision != messages.DecisionApprove && decision != messages.DecisionDeny {
		c.redirect(w, r, "/approvals", "Choose approve or deny.")
		return
	}
	switch remember {
	case "", messages.RememberCall, messages.RememberTurn, messages.RememberAgentTool:
	default:
		c.redirect(w, r, "/approvals", "Remember must be call, turn or agent_tool.")
		return
	}
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	req := messages.DecideRequest{ApprovalID: id, Decision: decision, Remember: remember, By: c.cfg.By, Reason: byOperator(ses, reason(r))}
	if req.By == "" {
		req.By, req.Reason = ses.operator, reason(r)
	}
	reply, err := c.cfg.Client.Operator().Decide(ctx, req)
	if err != nil {
		c.redirect(w, r, "/approvals", "Deciding failed: "+describe(err))
		return
	}
	c.cfg.Logger.Info("console decided an approval", "operator", ses.operator, "approval_id", id, "decision", decision, "remember", remember)
	c.redirect(w, r, "/calls/"+url.PathEscape(reply.Approval.CallID), "Approval "+reply.Approval.State+".")
}

type auditView struct {
	Filter  messages.AuditListRequest
	Since   string
	Until   string
	Limit   int
	Records []messages.AuditRecord
	Next    string
	Error   string
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	view := auditView{Filter: messages.AuditListRequest{
		Decision: q.Get("decision"), Agent: strings.TrimSpace(q.Get("agent")), Tool: strings.TrimSpace(q.Get("tool")), Cursor: q.Get("cursor"),
	}, Limit: messages.DefaultAuditListLimit}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil {
		view.Limit = min(max(n, 1), messages.MaxAuditListLimit)
	}
	view.Filter.Limit = view.Limit
	if msg := timeRange(q, &view.Filter.Since, &view.Filter.Until, &view.Since, &view.Until); msg != "" {
		view.Error = msg
	}
	if view.Filter.Decision != "" && !slices.Contains(messages.AuditDecisions, view.Filter.Decision) {
		view.Error = "Unknown decision " + strconv.Quote(view.Filter.Decision)
	}
	if view.Error == "" {
		ctx, cancel := c.busContext(r.Context())
		defer cancel()
		reply, err := c.cfg.Client.Operator().ListAudit(ctx, view.Filter)
		if err != nil {
			view.Error = "Listing the audit log failed: " + describe(err)
		} else {
			view.Records = reply.Records
			if reply.NextCursor != "" {
				next := r.URL.Query()
				next.Set("cursor", reply.NextCursor)
				view.Next = "/audit?" + next.Encode()
			}
		}
	}
	c.render(w, r, http.StatusOK, "audit", pageData{Title: "Audit log", Section: "audit", Page: struct {
		auditView
		Decisions []string
	}{view, messages.AuditDecisions}})
}

type turnView struct {
	Turn string
	Info *messages.TurnInfo
}

func (c *Console) turnPage(w http.ResponseWriter, r *http.Request) {
	turn := r.PathValue("id")
	if turn == "" {
		turn = strings.TrimSpace(r.URL.Query().Get("turn"))
	}
	data := pageData{Title: "Turn", Section: "turns"}
	view := turnView{Turn: turn}
	status := http.StatusOK
	if turn != "" {
		data.Title = "Turn " + turn
		ctx, cancel := c.busContext(r.Context())
		defer cancel()
		info, err := c.cfg.Client.Turn(ctx, turn)
		if err != nil {
			data.Error = "Reading the turn failed: " + describe(err)
			status = http.StatusBadGateway
			if messages.CodeOf(err) == messages.CodeTurnNotFound {
				status = http.StatusNotFound
			}
		} else {
			view.Info = info
		}
	}
	data.Page = view
	c.render(w, r, status, "turn", data)
}

// timeRange reads a page's since and until parameters into the filter's
// times and the form's shown values, and says what was wrong with the
// last one that is not a time (nothing when both read).
func timeRange(q url.Values, since, until *time.Time, sinceShown, untilShown *string) (problem string) {
	for _, f := range []struct {
		param string
		into  *time.Time
		shown *string
	}{{"since", since, sinceShown}, {"until", until, untilShown}} {
		if s := q.Get(f.param); s != "" {
			t, err := time.ParseInLocation(timeLayout, s, time.UTC)
			if err != nil {
				problem = fmt.Sprintf("%s: want a time like 2006-01-02T15:04 (UTC)", f.param)
				continue
			}
			*f.into, *f.shown = t, s
		}
	}
	return problem
}
