// Package compose runs deploy/compose/compose.yaml in containers: it needs
// a container engine and the images of scripts/images, so it runs only
// when TOOLBUS_COMPOSE_TEST=1 (scripts/compose-check.sh sets it up).
package compose

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
)

// The services whose health check is /readyz, as the compose file says.
var probed = []string{"coordinator-1", "coordinator-2", "worker", "indexer", "console", "mcp"}

// TestComposeSurvivesANodeKilled brings deploy/compose/compose.yaml up with
// one command, waits for every service's /readyz and runs each container's
// own health check, checks that every container's process runs as uid
// 65532, makes a call through the command line (an agent added with
// toolbus agent add) and one through the MCP front, kills one NATS node's
// container, and checks that calls through both still complete.
func TestComposeSurvivesANodeKilled(t *testing.T) {
	if os.Getenv("TOOLBUS_COMPOSE_TEST") != "1" {
		t.Skip("needs a container engine and the images: run scripts/compose-check.sh")
	}
	composeFile, err := filepath.Abs("../../deploy/compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	project := fmt.Sprintf("tbtest%d", time.Now().UnixNano()%1_000_000)
	env := append(os.Environ(), "COMPOSE_PROJECT_NAME="+project)
	client, cluster := consecutivePorts(t, 3), consecutivePorts(t, 3)
	var urls []string
	for _, p := range client {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	env = append(env,
		fmt.Sprintf("TOOLBUS_NATS_LISTEN=127.0.0.1:%d", client[0]),
		fmt.Sprintf("TOOLBUS_CLUSTER_PORT=%d", cluster[0]),
		"TOOLBUS_URL="+strings.Join(urls, ","))
	mcpAddr := testenv.FreeAddress(t)
	env = append(env, "TOOLBUS_CONSOLE_LISTEN="+testenv.FreeAddress(t), "TOOLBUS_MCP_LISTEN="+mcpAddr)
	probes := map[string]string{}
	for _, svc := range probed {
		probes[svc] = testenv.FreeAddress(t)
		env = append(env, "TOOLBUS_PROBE_"+strings.ToUpper(strings.ReplaceAll(svc, "-", "_"))+"="+probes[svc])
	}
	compose := func(args ...string) (string, error) {
		cmd := exec.Command(composeProgram(), append([]string{"-f", composeFile}, args...)...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := compose("logs", "--no-color", "--tail=40")
			t.Logf("logs:\n%s", out)
		}
		if out, err := compose("down", "--volumes", "--timeout", "60"); err != nil {
			t.Logf("down: %v\n%s", err, out)
		}
	})

	began := time.Now()
	if out, err := compose("up", "-d"); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	for _, svc := range probed {
		waitReady(t, svc, "http://"+probes[svc]+"/readyz", 3*time.Minute)
	}
	t.Logf("up and every /readyz answering 200 in %v", time.Since(began).Round(time.Second))
	for _, svc := range probed {
		id, err := compose("ps", "-q", svc)
		if err != nil {
			t.Fatalf("ps %s: %v\n%s", svc, err, id)
		}
		if out, err := exec.Command("podman", "healthcheck", "run", strings.TrimSpace(id)).CombinedOutput(); err != nil {
			t.Errorf("%s's health check: %v\n%s", svc, err, out)
		}
	}

	// Every process runs as the images' user, not root: read from the
	// host's /proc, where the container's main process is.
	for _, svc := range append([]string{"nats-1", "nats-2", "nats-3"}, probed...) {
		id, err := compose("ps", "-q", svc)
		if err != nil {
			t.Fatalf("ps %s: %v\n%s", svc, err, id)
		}
		pid, err := exec.Command("podman", "inspect", "--format", "{{.State.Pid}}", strings.TrimSpace(id)).Output()
		if err != nil {
			t.Fatalf("inspect %s: %v", svc, err)
		}
		status, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/status")
		if err != nil {
			t.Fatalf("%s's process: %v", svc, err)
		}
		uid := regexp.MustCompile(`(?m)^Uid:\s+(\d+)\s+(\d+)`).FindStringSubmatch(string(status))
		if uid == nil || uid[1] != "65532" || uid[2] != "65532" {
			t.Errorf("%s's process runs as uid %v, want 65532", svc, uid)
		}
	}

	if out, err := compose("run", "--rm", "toolbus", "agent", "add", "tester", "--dir", "/var/lib/toolbus"); err != nil || !strings.Contains(out, "agent user tester added") {
		t.Fatalf("agent add: %v\n%s", err, out)
	}
	cliCall := func(text string) {
		t.Helper()
		started := time.Now()
		out, err := compose("run", "--rm", "toolbus", "--creds", "/var/lib/toolbus/creds/tester.creds",
			"call", "demo-echo", fmt.Sprintf(`{"text":%q}`, text))
		if err != nil || !strings.Contains(out, text) {
			t.Fatalf("call through the command line: %v\n%s", err, out)
		}
		t.Logf("call through the command line (a container of its own): %v", time.Since(started).Round(time.Millisecond))
	}
	mc := mcpClient(t, project, mcpAddr)
	mcpCall := func(text string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req := mcp.CallToolRequest{}
		req.Params.Name = "demo-echo"
		req.Params.Arguments = map[string]any{"text": text}
		started := time.Now()
		res, err := mc.CallTool(ctx, req)
		if err != nil || res.IsError || len(res.Content) == 0 {
			t.Fatalf("MCP tools/call: %+v %v", res, err)
		}
		if got, ok := res.Content[0].(mcp.TextContent); !ok || got.Text != text {
			t.Fatalf("MCP tools/call answered %+v", res.Content)
		}
		t.Logf("call through the MCP front: %v", time.Since(started).Round(time.Millisecond))
	}
	cliCall("through the command line")
	mcpCall("through the MCP front")

	// One node of three dies.
	id, err := compose("ps", "-q", "nats-1")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	if out, err := exec.Command("podman", "kill", "--signal", "KILL", id).CombinedOutput(); err != nil {
		t.Fatalf("kill nats-1: %v\n%s", err, out)
	}
	state, _ := exec.Command("podman", "inspect", "--format", "{{.State.Status}}", id).Output()
	t.Logf("nats-1 killed (SIGKILL); its container is %s", bytes.TrimSpace(state))
	for i := range 3 {
		cliCall(fmt.Sprintf("with a node down, %d", i))
		mcpCall(fmt.Sprintf("with a node down, through MCP, %d", i))
	}
	state, _ = exec.Command("podman", "inspect", "--format", "{{.State.Status}}", id).Output()
	t.Logf("after the calls, nats-1's container is %s", bytes.TrimSpace(state))
}

// composeProgram is the compose command: $COMPOSE, else docker-compose.
func composeProgram() string {
	if c := os.Getenv("COMPOSE"); c != "" {
		return c
	}
	return "docker-compose"
}

func mcpClient(t *testing.T, project, addr string) *mcpclient.Client {
	t.Helper()
	mount, err := exec.Command("podman", "volume", "inspect", "--format", "{{.Mountpoint}}", project+"_toolbus").Output()
	if err != nil {
		t.Fatalf("volume inspect: %v", err)
	}
	token := testenv.InstallationMCPToken(t, filepath.Join(strings.TrimSpace(string(mount)), "mcp-tokens.yaml"))
	return testenv.MCPClient(t, "http://"+addr+"/mcp", token)
}

func waitReady(t *testing.T, svc, url string, bound time.Duration) {
	t.Helper()
	hc := &http.Client{Timeout: 3 * time.Second}
	deadline := time.Now().Add(bound)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's %s did not answer 200 within %v: %v", svc, url, bound, err)
		}
		time.Sleep(500 * time.Millisecond) // polling a process in another container: no event to wait on
	}
}

// consecutivePorts finds n consecutive free loopback ports: toolbus setup
// gives the nodes consecutive ports from the first.
func consecutivePorts(t *testing.T, n int) []int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		first := l.Addr().(*net.TCPAddr).Port
		held := []net.Listener{l}
		ok := first+n-1 <= 65535
		for p := first + 1; ok && p < first+n; p++ {
			more, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				break
			}
			held = append(held, more)
		}
		for _, h := range held {
			h.Close()
		}
		if ok {
			ports := make([]int, n)
			for i := range ports {
				ports[i] = first + i
			}
			return ports
		}
	}
	t.Fatal("no consecutive free ports")
	return nil
}
