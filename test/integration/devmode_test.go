package integration

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestAllInOneProcess starts the all-in-one mode as a user would and
// calls it through the command-line client.
func TestAllInOneProcess(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	dev := testenv.Start(t, bin, "dev", "--port", "0", "--data", t.TempDir())
	line := dev.WaitLine(t, "NATS URL:")
	url := strings.TrimSpace(strings.TrimPrefix(line, "NATS URL:"))
	dev.WaitLine(t, "Press Ctrl-C")

	// Standard output, which holds the result (a call says its ID on
	// standard error), and standard error too when the command fails.
	cli := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, append([]string{"--server", url}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return stdout.String() + stderr.String(), err
		}
		return stdout.String(), nil
	}
	out, err := cli("tools")
	if err != nil || !strings.Contains(out, "demo-word_count") || strings.Contains(out, "unavailable") {
		t.Fatalf("tools: %v\n%s", err, out)
	}
	out, err = cli("call", "demo-echo", `{"text":"hello from the cli"}`)
	if err != nil || strings.TrimSpace(out) != "hello from the cli" {
		t.Fatalf("call echo: %v\n%s", err, out)
	}
	out, err = cli("--json", "call", "demo-word_count", `{"text":"one two three"}`)
	if err != nil {
		t.Fatalf("call word_count: %v\n%s", err, out)
	}
	var res struct {
		Status            string         `json:"status"`
		StructuredContent map[string]int `json:"structured_content"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Status != "completed" || res.StructuredContent["words"] != 3 {
		t.Fatalf("call word_count printed %s (%v)", out, err)
	}
	out, err = cli("call", "demo-echo", `{"txt":"typo"}`)
	if err == nil || !strings.Contains(out, "invalid_arguments") {
		t.Fatalf("bad arguments: %v\n%s", err, out)
	}
	if err := dev.Interrupt(t); err != nil {
		t.Fatalf("dev mode did not stop cleanly: %v\n%s", err, dev.Output())
	}
}

// TestCLIWatchAndInterrupt: `toolbus call --watch` follows a call, and
// Ctrl-C cancels it; `toolbus calls get` then reports it cancelled.
func TestCLIWatchAndInterrupt(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	bin := testenv.Binary(t, "./cmd/toolbus")

	done := testenv.Start(t, bin, "--server", srv.URL(), "call", "--watch", "demo-sleep", `{"seconds":0.2}`)
	if err := done.Wait(testenv.Context(t)); err != nil {
		t.Fatalf("watched call: %v\n%s", err, done.Output())
	}
	if !strings.Contains(done.Output(), "slept 200ms") {
		t.Fatalf("watched call printed:\n%s", done.Output())
	}

	p := testenv.Start(t, bin, "--server", srv.URL(), "call", "--watch", "demo-sleep", `{"seconds":60}`)
	line := p.WaitLine(t, "call ")
	callID := strings.TrimSpace(strings.TrimPrefix(line, "call "))
	c := testenv.Client(t, srv.URL(), client.Options{})
	awaitEvent(t, c, callID, messages.EventProgress)
	if err := p.Interrupt(t); err == nil {
		t.Fatalf("an interrupted call exited 0:\n%s", p.Output())
	}
	if !strings.Contains(p.Output(), "cancelled") {
		t.Fatalf("interrupted call printed:\n%s", p.Output())
	}
	out, err := exec.Command(bin, "--server", srv.URL(), "calls", "get", callID).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "state    cancelled") {
		t.Fatalf("calls get: %v\n%s", err, out)
	}
}
