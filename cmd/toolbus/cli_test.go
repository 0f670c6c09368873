package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

func TestMain(m *testing.M) { leaks.Main(m, testenv.CleanupBinaries) }

type failArgs struct {
	Why string `json:"why"`
}

// stack runs NATS, a coordinator and a worker serving the demo tools and
// a tool that always fails, and returns the NATS URL and the toolbus binary.
func stack(t *testing.T) (string, string) {
	t.Helper()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	fail := worker.Func("fail", "Fails with the reason given.", func(ctx context.Context, in failArgs) (string, error) {
		return "", errors.New(in.Why)
	})
	testenv.Worker(t, srv.URL(), worker.Config{},
		worker.Namespace{Name: demo.Name, Tools: demo.Tools()},
		worker.Namespace{Name: "broken", Tools: []worker.Tool{fail}})
	return srv.URL(), testenv.Binary(t, "./cmd/toolbus")
}

// cli runs the toolbus binary and returns its standard output, standard
// error and exit status.
func cli(t *testing.T, bin, url string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--server", url}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("run toolbus %v: %v", args, err)
	return "", "", 0
}

func TestExitStatus(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"success", []string{"call", "demo-echo", `{"text":"hi"}`}, exitOK},
		{"the call's result is an error", []string{"call", "broken-fail", `{"why":"no"}`}, exitCallFailed},
		{"unknown command", []string{"frobnicate"}, exitUsage},
		{"arguments that are not JSON", []string{"call", "demo-echo", `{"text":`}, exitUsage},
		{"a tool that does not exist", []string{"call", "demo-nosuch", `{}`}, exitRequestFailed},
		{"arguments the tool refuses", []string{"call", "demo-echo", `{"txt":"typo"}`}, exitRequestFailed},
	} {
		if _, stderr, got := cli(t, bin, url, tc.args...); got != tc.want {
			t.Errorf("%s: exit status %d, want %d\n%s", tc.name, got, tc.want, stderr)
		}
	}
	if _, _, got := cli(t, bin, "nats://127.0.0.1:1", "tools"); got != exitRequestFailed {
		t.Errorf("no server: exit status %d, want %d", got, exitRequestFailed)
	}
}

func TestJSONErrors(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	type errorOutput struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		ExitCode int `json:"exit_code"`
	}
	for _, tc := range []struct {
		args     []string
		code     string
		exitCode int
	}{
		{[]string{"--json", "call", "demo-nosuch", `{}`}, "tool_not_found", exitRequestFailed},
		{[]string{"call", "--json", "demo-echo", `{"txt":"typo"}`}, "invalid_arguments", exitRequestFailed},
		{[]string{"--json", "call", "demo-echo", `{"text":`}, "usage", exitUsage},
		{[]string{"--server", "nats://127.0.0.1:1", "--json", "tools"}, "unreachable", exitRequestFailed},
		{[]string{"--json", "--creds", filepath.Join(t.TempDir(), "none.creds"), "tools"}, "unreachable", exitRequestFailed},
	} {
		stdout, stderr, status := cli(t, bin, url, tc.args...)
		var out errorOutput
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("%v: the error is not JSON (%v):\n%s\n%s", tc.args, err, stdout, stderr)
		}
		if out.Error.Code != tc.code || out.Error.Message == "" || out.ExitCode != tc.exitCode || status != tc.exitCode {
			t.Errorf("%v: %+v, exit status %d; want code %s and exit status %d", tc.args, out, status, tc.code, tc.exitCode)
		}
	}
}

// TestAnInterruptedCallGoesOn: Ctrl-C on a plain toolbus call ends its
// wait, not the call: exit 130, the call's ID and how to follow or cancel
// it on standard error, and the call still runs.
func TestAnInterruptedCallGoesOn(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	p := testenv.Start(t, bin, "--server", url, "call", "demo-sleep", `{"seconds":60}`)
	callID := strings.TrimPrefix(p.WaitLine(t, "call "), "call ")
	c := testenv.Client(t, url, client.Options{})
	testenv.Eventually(t, "the call runs", func() bool {
		info, err := c.Get(testenv.Context(t), callID)
		if err == nil && info.State.Terminal() {
			t.Fatalf("call %s ended %s before the interrupt", callID, info.State)
		}
		return err == nil && info.State == messages.StateRunning
	})
	if err := p.Interrupt(t); err == nil || p.Cmd.ProcessState.ExitCode() != exitInterrupted {
		t.Fatalf("interrupted call: %v, want exit status %d\n%s", err, exitInterrupted, p.Output())
	}
	if out := p.Output(); !strings.Contains(out, "stopped waiting for call "+callID+", which goes on") || !strings.Contains(out, "toolbus calls cancel "+callID) {
		t.Errorf("output %q, want the call named as going on, and how to cancel it", out)
	}
	info, err := c.Get(testenv.Context(t), callID)
	if err != nil || info.State != messages.StateRunning {
		t.Errorf("call after the interrupt: %+v %v, want it still running", info, err)
	}
}

func TestCallsWatchJSONPrintsEveryEvent(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	c := testenv.Client(t, url, client.Options{Agent: "tester"})
	reply, err := c.Submit(testenv.Context(t), messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":0.2}`)})
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, status := cli(t, bin, url, "calls", "watch", "--json", reply.CallID)
	if status != exitOK {
		t.Fatalf("exit status %d\n%s", status, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	kinds := map[messages.EventKind]int{}
	var last messages.CallEvent
	for _, line := range lines {
		var ev messages.CallEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.CallID != reply.CallID {
			t.Fatalf("line %q is not an event of the call (%v)", line, err)
		}
		kinds[ev.Kind]++
		last = ev
	}
	if kinds[messages.EventStarted] == 0 || kinds[messages.EventProgress] < 2 || kinds[messages.EventResult] != 1 ||
		last.Kind != messages.EventResult || last.Result == nil || last.Result.Status != messages.StateCompleted {
		t.Fatalf("events %v, last %+v:\n%s", kinds, last, stdout)
	}
}

// TestWatchWithoutTerminalPrintsLines: where standard output is not a
// terminal, --watch prints a plain line per event and draws no progress bar.
func TestWatchWithoutTerminalPrintsLines(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	stdout, stderr, status := cli(t, bin, url, "call", "--watch", "demo-sleep", `{"seconds":0.2}`)
	if status != exitOK || strings.TrimSpace(stdout) != "slept 200ms" {
		t.Fatalf("exit status %d, output %q\n%s", status, stdout, stderr)
	}
	if strings.ContainsAny(stderr, "\r\x1b") {
		t.Fatalf("the watch drew on a pipe:\n%q", stderr)
	}
	for _, want := range []string{"call ", "running on ", "% slept ", "completed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the watch printed no line with %q:\n%s", want, stderr)
		}
	}
}

// TestDevWithWorkerConfig runs toolbus dev with a worker configuration
// file: its namespaces are served by the dev process beside the demo tools.
func TestDevWithWorkerConfig(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	config := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(config, []byte("namespaces:\n  - name: extra\n    slots: 2\n    sources:\n      - demo: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := testenv.Start(t, bin, "dev", "--port", "0", "--data", t.TempDir(), "--worker-config", config)
	line := dev.WaitLine(t, "NATS URL:")
	url := strings.TrimSpace(strings.TrimPrefix(line, "NATS URL:"))
	dev.WaitLine(t, "Press Ctrl-C")
	stdout, stderr, status := cli(t, bin, url, "tools")
	if status != exitOK || !strings.Contains(stdout, "extra-echo") || !strings.Contains(stdout, "demo-echo") || strings.Contains(stdout, "unavailable") {
		t.Fatalf("tools: exit status %d\n%s%s", status, stdout, stderr)
	}
	stdout, stderr, status = cli(t, bin, url, "call", "extra-echo", `{"text":"configured"}`)
	if status != exitOK || strings.TrimSpace(stdout) != "configured" {
		t.Fatalf("call extra-echo: exit status %d\n%s%s", status, stdout, stderr)
	}
	if err := dev.Interrupt(t); err != nil {
		t.Fatalf("dev did not stop cleanly: %v\n%s", err, dev.Output())
	}

	// A mistake in the file stops dev before it starts.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("namespaces:\n  - name: x\n    sources:\n      - mcp: {name: s, transport: http}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "dev", "--port", "0", "--data", t.TempDir(), "--worker-config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bad.yaml:4: namespaces[0].sources[0].mcp.url: the http transport needs a url") {
		t.Fatalf("dev with a bad file: %v\n%s", err, out)
	}
}
