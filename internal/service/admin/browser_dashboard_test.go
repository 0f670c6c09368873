package admin_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestBrowserDashboardShowsRealCalls: after three calls of demo-echo and
// one of demo-sleep that runs on, the dashboard (where the console opens)
// shows, in a window 1280 pixels wide and within it: the calls per
// minute by state, with three completed; the demo namespace's calls
// ended, their queue wait and run time percentiles, in its row and its
// charts; and its queue depth, one call delivered, as the coordinator's
// sweeps sampled it.
func TestBrowserDashboardShowsRealCalls(t *testing.T) {
	b := startBrowserStack(t, "")
	ctx := testenv.Context(t)
	for i := range 3 {
		if _, err := b.client.Call(ctx, "demo-echo", map[string]any{"text": fmt.Sprint("echo ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	sleeping, err := b.client.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":120}`)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = b.client.Cancel(testenv.Context(t), sleeping.CallID, "the test is over") })
	// The coordinator samples the queues as it sweeps, every 5 s: wait
	// for a sample that saw the sleeping call delivered.
	pollUntil(t, testenv.Patience, func() bool {
		stats, err := b.client.Operator().CallStats(ctx, messages.CallStatsRequest{Namespace: "demo"})
		return err == nil && len(stats.Namespaces) == 1 && stats.Namespaces[0].QueueDepth != nil && stats.Namespaces[0].QueueDepth.Delivered >= 1
	}, func() string { return "no sample of the demo queue with the sleeping call delivered" })

	b.do(t, "a window 1280 pixels wide", chromedp.EmulateViewport(1280, 900))
	b.login(t)
	b.waitFor(t, "the dashboard", `location.pathname === "/dashboard" && document.getElementById("calls-chart") !== null`)

	// Calls per minute by state: bars of the calls that ended, lines of
	// those queued and started, totals beside them.
	if n := b.eval(t, `parseInt(document.querySelector('dd.total[data-state="completed"]').textContent)`); n < 3 {
		t.Errorf("%v completed calls in the totals, want at least 3", n)
	}
	if n := b.eval(t, `[...document.querySelectorAll('#calls-chart rect.bar[data-state="completed"]')].reduce((sum, r) => sum + parseInt(r.dataset.count), 0)`); n < 3 {
		t.Errorf("the completed bars add up to %v, want at least 3", n)
	}
	if title := b.evalString(t, `document.querySelector('#calls-chart rect.bar[data-state="completed"] title').textContent`); !regexp.MustCompile(`^\d\d:\d\d UTC: completed \d+$`).MatchString(title) {
		t.Errorf("a completed bar's title is %q, want its minute and count", title)
	}
	if n := b.eval(t, `document.querySelectorAll('#calls-chart [data-series="queued"], #calls-chart [data-series="running"]').length`); n < 2 {
		t.Errorf("%v lines or dots of calls queued and running, want both", n)
	}

	// The demo namespace: its row, and its charts.
	row := `tr.ns-row[data-namespace="demo"]`
	if n := b.eval(t, `parseInt(document.querySelector('`+row+` .ended').textContent)`); n < 3 {
		t.Errorf("demo's row says %v calls ended, want at least 3", n)
	}
	for _, cell := range []string{"wait", "run"} {
		p50 := b.evalString(t, `(document.querySelector('`+row+` .`+cell+` [data-p50]') || {dataset: {}}).dataset.p50 || ""`)
		if _, err := strconv.Atoi(p50); err != nil {
			t.Errorf("demo's %s percentiles: p50 %q, want a number of milliseconds", cell, p50)
		}
	}
	if n := b.eval(t, `parseInt((document.querySelector('`+row+` .depth [data-delivered]') || {dataset: {}}).dataset.delivered)`); n < 1 {
		t.Errorf("demo's queue now: %v delivered, want the sleeping call", n)
	}
	for _, id := range []string{"ns-demo-wait", "ns-demo-run"} {
		if n := b.eval(t, `document.querySelectorAll('#`+id+` [data-series="p50"]').length`); n < 1 {
			t.Errorf("chart %s draws no p50", id)
		}
	}
	if n := b.eval(t, `Math.max(0, ...[...document.querySelectorAll('#ns-demo-depth rect.column')].map(r => parseInt(r.dataset.count)))`); n < 1 {
		t.Errorf("the demo queue depth chart's deepest minute holds %v calls, want at least 1", n)
	}
	if n := b.eval(t, `document.querySelectorAll('#ns-demo-depth [data-series="depth"]').length`); n < 1 {
		t.Error("the demo queue depth chart draws no depth")
	}

	// All of it within the window.
	var boxes []cellBox
	raw := b.evalString(t, `JSON.stringify([...document.querySelectorAll('svg.chart, table.namespaces th, dl.totals div')].map(c => {
		const r = c.getBoundingClientRect();
		return {text: c.id || c.textContent.trim().slice(0, 40), left: r.left, right: r.right, width: r.width};
	}))`)
	if err := json.Unmarshal([]byte(raw), &boxes); err != nil {
		t.Fatal(err)
	}
	width := b.eval(t, `document.documentElement.clientWidth`)
	if len(boxes) < 4+5+8 {
		t.Fatalf("%d charts, headers and totals drawn: %+v", len(boxes), boxes)
	}
	for _, c := range boxes {
		if c.Left < 0 || c.Right > width+0.5 || c.Width <= 0 {
			t.Errorf("%q is drawn from %.0f to %.0f px, outside the window's %.0f", c.Text, c.Left, c.Right, width)
		}
	}
	if scroll := b.eval(t, `document.documentElement.scrollWidth`); scroll > width+0.5 {
		t.Errorf("the dashboard is %.0f px wide in a window of %.0f: it scrolls sideways", scroll, width)
	}
}
