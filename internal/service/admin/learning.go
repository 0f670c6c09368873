package admin

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

type learningView struct {
	// Tool is the tool asked about, as typed.
	Tool   string
	Status *messages.LearningStatus
}

// learningPage shows whether discovery learns from use, how much evidence
// there is, and with ?tool=, what was learned of that tool
// (learning.status).
func (c *Console) learningPage(w http.ResponseWriter, r *http.Request) {
	view := learningView{Tool: strings.TrimSpace(r.URL.Query().Get("tool"))}
	data := pageData{Title: "Learning from use", Section: "learning"}
	status := http.StatusOK
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	st, err := c.cfg.Client.Operator().LearningStatus(ctx, view.Tool)
	if err != nil {
		data.Error = "Reading the learning status failed: " + describe(err)
		status = http.StatusBadGateway
		if code := messages.CodeOf(err); code == messages.CodeInvalidName || code == messages.CodeBadRequest {
			status = http.StatusBadRequest
		}
	} else {
		view.Status = st
	}
	data.Page = view
	c.render(w, r, status, "learning", data)
}

// switchLearning switches learning from use on or off for the whole
// installation; off needs a reason.
func (c *Console) switchLearning(w http.ResponseWriter, r *http.Request) {
	ses := sessionOf(r.Context())
	if !c.access.checkPost(w, r, ses) {
		return
	}
	enable := r.PostFormValue("enable") == "true"
	why := reason(r)
	if !enable && why == "" {
		c.redirect(w, r, "/learning", "Give a reason to switch learning off.")
		return
	}
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	if _, err := c.cfg.Client.Operator().SetLearning(ctx, enable, byOperator(ses, why)); err != nil {
		c.redirect(w, r, "/learning", "Switching learning failed: "+describe(err))
		return
	}
	c.cfg.Logger.Info("console switched learning from use", "operator", ses.operator, "on", enable, "reason", why)
	if enable {
		c.redirect(w, r, "/learning", "Learning from use switched on.")
		return
	}
	c.redirect(w, r, "/learning", "Learning from use switched off.")
}

// resetLearning deletes the usage evidence for one tool, or with all=true
// for every tool.
func (c *Console) resetLearning(w http.ResponseWriter, r *http.Request) {
	ses := sessionOf(r.Context())
	if !c.access.checkPost(w, r, ses) {
		return
	}
	tool := strings.TrimSpace(r.PostFormValue("tool"))
	all := r.PostFormValue("all") == "true"
	back := "/learning"
	if tool != "" {
		back += "?" + url.Values{"tool": {tool}}.Encode()
	}
	if all == (tool != "") {
		c.redirect(w, r, back, "Name a tool, or reset the evidence for every tool.")
		return
	}
	ctx, cancel := c.busContext(r.Context())
	defer cancel()
	reply, err := c.cfg.Client.Operator().ResetLearning(ctx, tool)
	if err != nil {
		c.redirect(w, r, back, "Resetting what was learned failed: "+describe(err))
		return
	}
	c.cfg.Logger.Info("console deleted usage evidence", "operator", ses.operator, "tool", tool, "all", all, "records", reply.Deleted)
	what := "every tool"
	if tool != "" {
		what = tool
	}
	c.redirect(w, r, back, fmt.Sprintf("Deleted %d records of evidence for %s.", reply.Deleted, what))
}
