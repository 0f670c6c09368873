package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
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

// TestDevStartErrorNamesItsCause: toolbus dev that cannot start says why:
// a port taken, with what to do about it, and a store it cannot use,
// without a word about ports.
func TestDevStartErrorNamesItsCause(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, args := range [][]string{
		{"dev", "--port", port, "--data", t.TempDir()},
		{"dev", "--port", "0", "--mcp-port", port, "--console-port", "-1", "--data", t.TempDir()},
	} {
		_, stderr, status := cli(t, bin, "", args...)
		if status != exitRequestFailed || !strings.Contains(stderr, "127.0.0.1:"+port) || !strings.Contains(stderr, "address already in use") || !strings.Contains(stderr, "--port 0 picks free ones") {
			t.Errorf("%v with the port taken: exit status %d\n%s", args, status, stderr)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, status := cli(t, bin, "", "dev", "--port", "0", "--data", filepath.Join(file, "data"))
	if status != exitRequestFailed || !strings.Contains(stderr, "toolbus: start: natsserver: Can't start JetStream") || strings.Contains(stderr, "port") {
		t.Errorf("dev with a store under a file: exit status %d\n%s", status, stderr)
	}
}
