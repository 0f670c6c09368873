package integration

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/testenv"
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

	cli := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--server", url}, args...)...).CombinedOutput()
		return string(out), err
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
