package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// longTool is a tool whose name is long, made of one word: a table that
// wraps names at their hyphen or anywhere else shows it on two lines.
const longTool = "reports-summarizeQuarterRevenueByRegion"

// serveLongTool starts a worker of the namespace reports, whose one tool
// has a long name, on the browser stack's bus.
func serveLongTool(t *testing.T, b *browserStack) {
	t.Helper()
	tool := worker.Func("summarizeQuarterRevenueByRegion", "Sums up a quarter's revenue.", func(ctx context.Context, _ struct{}) (string, error) {
		return "12.3M", nil
	})
	testenv.Worker(t, b.stack.URL(), worker.Config{}, worker.Namespace{Name: "reports", Tools: []worker.Tool{tool}})
	pollUntil(t, testenv.Patience, func() bool {
		reply, err := b.client.ListTools(testenv.Context(t), messages.ListToolsRequest{Namespace: "reports"})
		return err == nil && len(reply.Tools) == 1 && reply.Tools[0].Available
	}, func() string { return longTool + " is not listed available" })
}

// cellBox is where the browser drew one cell of a table.
type cellBox struct {
	Text  string  `json:"text"`
	Left  float64 `json:"left"`
	Right float64 `json:"right"`
	Width float64 `json:"width"`
}

// TestBrowserExecutionLogFitsAt1280: in a window 1280 pixels wide, every
// column of the execution log is drawn within the window, for a call
// of a long tool by an agent with a long ID in a turn; the call's ID is
// shown shortened, whole in its title and in the text a copy takes; the
// tool's name is on one line and whole, and stays on one line in a
// window too narrow for the table.
func TestBrowserExecutionLogFitsAt1280(t *testing.T) {
	b := startBrowserStack(t, "")
	ctx := testenv.Context(t)
	serveLongTool(t, b)
	reply, err := b.client.Submit(ctx, messages.SubmitRequest{
		Tool: longTool, Agent: "support-assistant-production-eu-west-1", Turn: "turn-2026-11-29-0001-4f9c2a7d81",
		Arguments: messages.JSON(`{}`), Wait: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if reply.State != messages.StateCompleted {
		t.Fatalf("the call of %s: %+v", longTool, reply)
	}
	b.do(t, "a window 1280 pixels wide", chromedp.EmulateViewport(1280, 900))
	b.login(t)
	row := fmt.Sprintf(`tr.call-row[data-call="%s"]`, reply.CallID)
	b.open(t, "/calls", chromedp.CSS(row))

	var boxes []cellBox
	raw := b.evalString(t, `JSON.stringify([...document.querySelectorAll('table.calls thead th, `+row+` td')].map(c => {
		const r = c.getBoundingClientRect();
		return {text: c.textContent.trim().slice(0, 40), left: r.left, right: r.right, width: r.width};
	}))`)
	if err := json.Unmarshal([]byte(raw), &boxes); err != nil {
		t.Fatal(err)
	}
	if len(boxes) != 18 {
		t.Fatalf("%d header and row cells, want 9 of each: %+v", len(boxes), boxes)
	}
	width := b.eval(t, `document.documentElement.clientWidth`)
	for _, c := range boxes {
		if c.Left < 0 || c.Right > width+0.5 || c.Width <= 0 {
			t.Errorf("cell %q is drawn from %.0f to %.0f px, outside the window's %.0f", c.Text, c.Left, c.Right, width)
		}
	}
	if scroll := b.eval(t, `document.documentElement.scrollWidth`); scroll > width+0.5 {
		t.Errorf("the page is %.0f px wide in a window of %.0f: it scrolls sideways", scroll, width)
	}

	id := row + ` .call-id`
	if got := b.evalString(t, `document.querySelector('`+id+`').textContent`); got != reply.CallID {
		t.Errorf("the call ID's text is %q, want the whole ID %q (what a copy takes)", got, reply.CallID)
	}
	if got := b.evalString(t, `document.querySelector('`+id+`').title`); got != reply.CallID {
		t.Errorf("the call ID's title is %q, want the whole ID %q (shown on hover)", got, reply.CallID)
	}
	if shown := b.eval(t, `document.querySelector('`+id+`').getBoundingClientRect().width`); shown > 100 {
		t.Errorf("the call ID of %d characters is drawn %.0f px wide: want it shortened, at most 100 px", len(reply.CallID), shown)
	}
	copied := b.evalString(t, `(() => {
		const range = document.createRange();
		range.selectNodeContents(document.querySelector('`+id+`'));
		const sel = getSelection();
		sel.removeAllRanges();
		sel.addRange(range);
		return sel.toString();
	})()`)
	if copied != reply.CallID {
		t.Errorf("selecting the call ID selects %q, want the whole ID %q", copied, reply.CallID)
	}

	name := row + ` .tool-name`
	if got := b.evalString(t, `document.querySelector('`+name+`').textContent`); got != longTool {
		t.Errorf("the tool's name reads %q, want %q", got, longTool)
	}
	if lines := b.eval(t, `document.querySelector('`+name+`').getClientRects().length`); lines != 1 {
		t.Errorf("the tool's name is drawn on %.0f lines, want 1", lines)
	}
	if shown, whole := b.eval(t, `document.querySelector('`+name+`').clientWidth`), b.eval(t, `document.querySelector('`+name+`').scrollWidth`); shown < whole {
		t.Errorf("the tool's name is drawn %.0f px wide of its %.0f: it is cut", shown, whole)
	}

	// In a window too narrow for every column, the name still does not
	// wrap: the table scrolls within its frame.
	b.do(t, "a window 800 pixels wide", chromedp.EmulateViewport(800, 900))
	b.open(t, "/calls", chromedp.CSS(row))
	if lines := b.eval(t, `document.querySelector('`+name+`').getClientRects().length`); lines != 1 {
		t.Errorf("at 800 px, the tool's name is drawn on %.0f lines, want 1", lines)
	}
	if scroll, width := b.eval(t, `document.documentElement.scrollWidth`), b.eval(t, `document.documentElement.clientWidth`); scroll > width+0.5 {
		t.Errorf("at 800 px, the page is %.0f px wide: the table's frame should scroll, not the page", scroll)
	}
}

// TestBrowserCompletedCallShowsCompleteProgress: the page of a completed
// call whose tool reported no progress shows its progress bar full, and
// says so; so does the page of a call that completes while it is open.
func TestBrowserCompletedCallShowsCompleteProgress(t *testing.T) {
	b := startBrowserStack(t, "")
	ctx := testenv.Context(t)
	b.login(t)
	done, err := b.client.Call(ctx, "demo-echo", map[string]any{"text": "no progress reported"})
	if err != nil {
		t.Fatal(err)
	}
	b.open(t, "/calls/"+done.CallID, "#timeline")
	b.waitFor(t, "the call completed", `document.getElementById("state").textContent === "completed"`)
	if v := b.eval(t, `document.getElementById("progress").position`); v != 1 {
		t.Errorf("the progress bar of a completed call is at %v, want 1 (full)", v)
	}
	if text := b.evalString(t, `document.getElementById("progress-text").textContent`); text != "complete" {
		t.Errorf("the progress text of a completed call is %q, want complete", text)
	}

	// A call that completes while its page is open, its tool having
	// reported a quarter of the way: the bar fills when the result comes.
	release := make(chan struct{})
	quarter := worker.Func("quarter", "Reports a quarter of the way, then waits to be released.", func(ctx context.Context, _ struct{}) (string, error) {
		worker.ReportProgress(ctx, 1, 4, "a quarter")
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	testenv.Worker(t, b.stack.URL(), worker.Config{}, worker.Namespace{Name: "steps", Tools: []worker.Tool{quarter}})
	pollUntil(t, testenv.Patience, func() bool {
		reply, err := b.client.ListTools(ctx, messages.ListToolsRequest{Namespace: "steps"})
		return err == nil && len(reply.Tools) == 1 && reply.Tools[0].Available
	}, func() string { return "steps-quarter is not listed available" })
	reply, err := b.client.Submit(ctx, messages.SubmitRequest{Tool: "steps-quarter", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	b.open(t, "/calls/"+reply.CallID, "#timeline")
	b.waitFor(t, "a quarter of the way", `document.getElementById("progress").position === 0.25`)
	close(release)
	b.waitFor(t, "the call completed", `document.getElementById("state").textContent === "completed"`)
	b.waitFor(t, "the bar full", `document.getElementById("progress").position === 1 && document.getElementById("progress-text").textContent === "complete"`)
}

func (b *browserStack) evalString(t *testing.T, expression string) string {
	t.Helper()
	v, err := chromedp.Run(b.tab, chromedp.Evaluate[string](expression))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expression, err)
	}
	return v
}
