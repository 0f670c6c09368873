package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestLearningPage: the console shows whether discovery learns from use
// and what agents' use taught it of a tool, switches learning off (with
// a reason, which names the operator) and on, and forgets a tool's
// evidence.
func TestLearningPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	csrf := b.login(t, hc)
	ctx := testenv.Context(t)

	// An agent finds the echo tool in a turn and calls it: evidence.
	if _, err := b.client.Discover(ctx, messages.DiscoverRequest{Query: "return the text unchanged", Turn: "turn-learn"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Call(ctx, "demo-echo", map[string]any{"text": "x"}, client.WithTurn("turn-learn")); err != nil {
		t.Fatal(err)
	}
	status := func(tool string) *messages.LearningStatus {
		st, err := b.client.Operator().LearningStatus(ctx, tool)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	pollUntil(t, time.Minute, func() bool { return status("").Records == 1 }, func() string {
		return fmt.Sprintf("no evidence recorded for demo-echo: %+v", status(""))
	})

	resp, page := do(t, hc, "GET", b.url+"/learning?tool=demo:echo", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="learning-state">on<`) || !strings.Contains(page, `id="learning-records">1<`) ||
		!strings.Contains(page, `id="learning-tool">demo-echo<`) || !strings.Contains(page, "1 agents") || !strings.Contains(page, "unchang×") {
		t.Fatalf("learning page of demo:echo: %s\n%s", resp.Status, page)
	}
	if resp, page := do(t, hc, "GET", b.url+"/learning?tool=not%20a%20tool", nil, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, `id="error"`) {
		t.Errorf("learning page of a bad name: %s\n%s", resp.Status, page)
	}

	post := func(path string, form url.Values) string {
		t.Helper()
		form.Set("csrf", csrf)
		resp, _ := do(t, hc, "POST", b.url+path, form, nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
		_, page := do(t, hc, "GET", b.url+resp.Header.Get("Location"), nil, nil)
		return page
	}
	if page := post("/learning/switch", url.Values{"enable": {"false"}}); !strings.Contains(page, "Give a reason") || !status("").Enabled {
		t.Fatalf("switching off without a reason:\n%s", page)
	}
	page = post("/learning/switch", url.Values{"enable": {"false"}, "reason": {"privacy review"}})
	if st := status(""); st.Enabled || st.Reason != "privacy review (by alice in the console)" || !strings.Contains(page, `id="learning-state">off<`) {
		t.Fatalf("switched off: %+v\n%s", st, page)
	}
	if post("/learning/switch", url.Values{"enable": {"true"}}); !status("").Enabled {
		t.Fatal("learning not switched on again")
	}

	if page := post("/learning/reset", url.Values{}); !strings.Contains(page, "Name a tool") || status("").Records != 1 {
		t.Fatalf("a reset naming nothing:\n%s", page)
	}
	page = post("/learning/reset", url.Values{"tool": {"demo-echo"}})
	if !strings.Contains(page, "Deleted 1 records of evidence for demo-echo.") || status("").Records != 0 {
		t.Fatalf("reset of demo-echo:\n%s", page)
	}
	if resp, _ := do(t, hc, "POST", b.url+"/learning/reset", url.Values{"all": {"true"}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a reset without the CSRF token: %s", resp.Status)
	}
}
