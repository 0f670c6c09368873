package admin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/admin"
	"github.com/toolbus/toolbus/internal/service/devstack"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// chromiumEnv names a browser binary for the browser tests, where none of
// the usual names is on PATH.
const chromiumEnv = "TOOLBUS_CHROMIUM"

// chromium finds a Chromium or Chrome binary, or skips the test: the only
// reason a browser test may skip.
func chromium(t *testing.T) string {
	t.Helper()
	if path := os.Getenv(chromiumEnv); path != "" {
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skipf("no chromium binary found (install chromium, or set $%s): the browser tests need one", chromiumEnv)
	return ""
}

// browserStack is the dev stack with its console, and a headless browser.
type browserStack struct {
	stack  *devstack.Stack
	client *client.Client
	tab    context.Context
}

// startBrowserStack starts the dev stack (embedded NATS, coordinator, demo
// worker, indexer, console with a login token) and a headless Chromium
// with one tab. On failure the tab's screenshot is saved under the test's
// temp dir, and its path logged.
func startBrowserStack(t *testing.T, policy string) *browserStack {
	t.Helper()
	binary := chromium(t)
	shots := t.TempDir()
	cfg := devstack.Config{
		DataDir: t.TempDir(), Port: 0, ConsoleListen: "127.0.0.1:0",
		ConsoleTokens: map[string]admin.Operator{testToken: {Name: "alice"}}, Logger: testenv.Logger(t),
	}
	if policy != "" {
		cfg.PolicyFile = filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(cfg.PolicyFile, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stack, err := devstack.Start(testenv.Context(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = stack.Stop(ctx)
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(binary),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to sandbox as root
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	// The first action starts the browser; it lives as long as tab.
	if _, err := chromedp.Run(tab, chromedp.Evaluate[int](`1`)); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start %s: %v", binary, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(tab, 10*time.Second)
			shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			cancel()
			path := filepath.Join(shots, "failure.png")
			if err == nil {
				err = os.WriteFile(path, shot, 0o600)
			}
			if err != nil {
				t.Logf("no screenshot: %v", err)
			} else {
				t.Logf("screenshot of the page at the failure: %s", path)
			}
			ctx, cancel = context.WithTimeout(tab, 5*time.Second)
			text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText.slice(0, 4000)`))
			cancel()
			if err == nil {
				t.Logf("the page at the failure:\n%s", text)
			}
		}
		cancelTab()
		cancelAlloc()
	})
	c, err := client.New(testenv.Connect(t, stack.URL()), client.Options{Agent: "browser-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Pages are rendered once: the coordinator must list the demo tools,
	// which it does once its watch of the catalog brought them.
	var listed []string
	pollUntil(t, testenv.Patience, func() bool {
		listed = listed[:0]
		reply, err := c.ListTools(testenv.Context(t), messages.ListToolsRequest{})
		if err != nil {
			return false
		}
		for _, tool := range reply.Tools {
			listed = append(listed, tool.Name)
		}
		return slices.Contains(listed, "demo-echo") && slices.Contains(listed, "demo-sleep")
	}, func() string { return fmt.Sprintf("the demo tools are not listed: %v", listed) })
	return &browserStack{stack: stack, client: c, tab: tab}
}

// do runs browser steps, bounded so that a page that never shows what is
// waited for fails the test rather than hanging it.
func (b *browserStack) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, testenv.Patience)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls a JavaScript expression in the page until it is true.
func (b *browserStack) waitFor(t *testing.T, what, expression string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, testenv.Patience+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expression, chromedp.WithPollingTimeout(testenv.Patience), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expression, err)
	}
}

func (b *browserStack) eval(t *testing.T, expression string) float64 {
	t.Helper()
	v, err := chromedp.Run(b.tab, chromedp.Evaluate[float64](expression))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expression, err)
	}
	return v
}

// login opens the console, which sends the browser to the login page,
// and logs in with the token.
func (b *browserStack) login(t *testing.T) {
	t.Helper()
	b.do(t, "log in",
		chromedp.Navigate(b.stack.ConsoleURL),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("operator")),
	)
}

func (b *browserStack) open(t *testing.T, path string, visible chromedp.CSS) {
	t.Helper()
	b.do(t, "open "+path, chromedp.Navigate(strings.TrimSuffix(b.stack.ConsoleURL, "/")+path), chromedp.WaitVisible(visible))
}

// TestBrowserLoginShowsTheDemoTools: after logging in, the console opens
// on the dashboard, and the catalog lists the demo tools, available, with
// the demo worker's slots.
func TestBrowserLoginShowsTheDemoTools(t *testing.T) {
	b := startBrowserStack(t, "")
	b.login(t)
	b.waitFor(t, "the dashboard", `location.pathname === "/dashboard" && document.getElementById("calls-chart") !== null`)
	b.open(t, "/catalog", `tr[data-tool="demo-echo"]`)
	b.waitFor(t, "the demo tools", `!!document.querySelector('tr[data-tool="demo-sleep"]') && !!document.querySelector('tr[data-tool="demo-echo"]')`)
	b.waitFor(t, "demo-sleep available", `(document.querySelector('tr[data-tool="demo-sleep"] .availability') || {}).textContent?.includes("available")`)
	b.waitFor(t, "the demo worker's slots", `/^\d+\/64$/.test((document.querySelector('#ns-demo .slots') || {}).textContent?.trim())`)
}

// TestBrowserFollowsAndCancelsACall: the call page of a running demo-sleep
// shows its progress advance, and its cancel button cancels it.
func TestBrowserFollowsAndCancelsACall(t *testing.T) {
	b := startBrowserStack(t, "")
	ctx := testenv.Context(t)
	b.login(t)
	// Long enough for the page's steps before the cancel on a busy
	// machine; it reports progress every tenth of it.
	reply, err := b.client.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":60}`)})
	if err != nil {
		t.Fatal(err)
	}
	b.open(t, "/calls/"+reply.CallID, "#timeline")
	b.waitFor(t, "the call running", `document.getElementById("state").textContent === "running"`)
	b.waitFor(t, "some progress", `document.getElementById("progress").value > 0`)
	first := b.eval(t, `document.getElementById("progress").value`)
	b.waitFor(t, "more progress", fmt.Sprintf(`document.getElementById("progress").value > %v`, first))
	b.waitFor(t, "progress lines in the timeline", `document.querySelectorAll("#timeline li.event-progress").length >= 2`)
	b.do(t, "cancel", chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("notice")))
	b.waitFor(t, "the call cancelled", `document.getElementById("state").textContent === "cancelled"`)
	info, err := b.client.Get(ctx, reply.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != messages.StateCancelled {
		t.Fatalf("the call is %s after the page cancelled it", info.State)
	}
}

// TestBrowserApprovesAQueuedCall: a call held for an operator's approval
// is listed on the approvals page; approving it there shows the call,
// which runs and completes.
func TestBrowserApprovesAQueuedCall(t *testing.T) {
	b := startBrowserStack(t, "default: allow\nrules:\n  - {tool: \"demo:echo\", effect: ask, reason: echo needs a nod}\n")
	ctx := testenv.Context(t)
	b.login(t)
	reply, err := b.client.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"approved by a browser"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if reply.State != messages.StateAwaitingApproval || reply.Approval == nil {
		t.Fatalf("submit: %+v, want a call awaiting approval", reply)
	}
	section := chromedp.CSS("#approval-" + reply.Approval.ApprovalID)
	b.open(t, "/approvals", section)
	b.do(t, "approve", chromedp.Click(section+" button.approve"), chromedp.WaitVisible(chromedp.ID("timeline")))
	b.waitFor(t, "the call page", fmt.Sprintf(`location.pathname === "/calls/%s"`, reply.CallID))
	b.waitFor(t, "the call completed", `document.getElementById("state").textContent === "completed"`)
	b.waitFor(t, "the echo in the result", `document.getElementById("result").textContent.includes("approved by a browser")`)
	b.waitFor(t, "the approval in the timeline", `document.querySelector("#timeline li.event-approval") !== null`)
}

// TestBrowserDisablesATool: disabling demo-echo from the catalog page,
// with a reason, shows it disabled and makes submits of it refused.
func TestBrowserDisablesATool(t *testing.T) {
	b := startBrowserStack(t, "")
	ctx := testenv.Context(t)
	b.login(t)
	row := chromedp.CSS(`tr[data-tool="demo-echo"]`)
	b.open(t, "/catalog", row)
	b.do(t, "disable demo-echo",
		chromedp.SendKeys(row+" input.reason-input", "under repair"),
		chromedp.Click(row+" button.disable"),
		chromedp.WaitVisible(chromedp.ID("notice")),
	)
	b.waitFor(t, "demo-echo shown disabled", `(document.querySelector('tr[data-tool="demo-echo"] .availability') || {}).textContent?.includes("under repair")`)
	// The coordinator learns of the switch through its watch of the
	// catalog, a moment after the write; nothing outside it signals when.
	var err error
	pollUntil(t, testenv.Patience, func() bool {
		_, err = b.client.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`)})
		return errors.Is(err, messages.ErrToolDisabled)
	}, func() string {
		return fmt.Sprintf("a submit of demo-echo after disabling it: %v, want tool_disabled", err)
	})
}

// pollUntil checks cond every 50ms until it holds, and fails the test
// with what's message once d passed.
func pollUntil(t *testing.T, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatal(what())
		case <-tick.C:
		}
	}
}

// TestBrowserExecutionLogShowsCalls: the execution log lists a finished
// call, and a call made while the page is open appears without a reload.
func TestBrowserExecutionLogShowsCalls(t *testing.T) {
	b := startBrowserStack(t, "")
	ctx := testenv.Context(t)
	b.login(t)
	first, err := b.client.Call(ctx, "demo-echo", map[string]any{"text": "first"})
	if err != nil {
		t.Fatal(err)
	}
	b.open(t, "/calls", "#calls-body")
	b.waitFor(t, "the first call listed", fmt.Sprintf(`document.querySelector('tr[data-call="%s"]') !== null`, first.CallID))
	second, err := b.client.Call(ctx, "demo-echo", map[string]any{"text": "second"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "the second call listed by the live refresh", fmt.Sprintf(`document.querySelector('tr[data-call="%s"]') !== null`, second.CallID))
}
