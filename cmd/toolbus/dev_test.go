package main

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestDevStopsAfterTheDrain: toolbus dev, interrupted while a call runs
// past its --drain, hands the call back once the drain is over and stops
// the rest without a warning, exit status 0; the call is not failed.
func TestDevStopsAfterTheDrain(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	data := t.TempDir()
	dev := testenv.Start(t, bin, "dev", "--port", "0", "--data", data, "--drain", "1s")
	url := strings.TrimSpace(strings.TrimPrefix(dev.WaitLine(t, "NATS URL:"), "NATS URL:"))
	dev.WaitLine(t, "Press Ctrl-C")

	ctx := testenv.Context(t)
	c := testenv.Client(t, url, client.Options{Agent: "tester"})
	reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":600}`)})
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range c.Watch(ctx, reply.CallID) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == messages.EventStarted {
			break
		}
	}
	if err := dev.Interrupt(t); err != nil {
		t.Fatalf("dev did not stop cleanly: %v\n%s", err, dev.Output())
	}
	out := dev.Output()
	stopping := strings.Index(out, "stopping: running calls may finish for 1s (--drain")
	if stopping < 0 {
		t.Fatalf("dev did not say how long the drain is:\n%s", out)
	}
	for _, line := range strings.Split(out[stopping:], "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("dev warned while stopping: %s", line)
		}
	}

	// Started again, it has the call, handed back, not ended.
	again := testenv.Start(t, bin, "dev", "--port", "0", "--data", data, "--drain", "1s", "--mcp-port", "-1", "--console-port", "-1")
	url = strings.TrimSpace(strings.TrimPrefix(again.WaitLine(t, "NATS URL:"), "NATS URL:"))
	info, err := testenv.Client(t, url, client.Options{Agent: "tester"}).Get(ctx, reply.CallID)
	if err != nil || info.Result != nil {
		t.Fatalf("the call handed back at the stop: %+v %v", info, err)
	}
	if err := again.Interrupt(t); err != nil {
		t.Fatalf("dev did not stop cleanly: %v\n%s", err, again.Output())
	}
}
