package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// deployedStack runs the deployment's server configuration with a
// coordinator that reads its identities file (and what mutate sets) and
// the demo worker, each process as its own user, and returns the
// server's URL and the toolbus binary.
func deployedStack(t *testing.T, mutate ...func(*coordinator.Config)) (string, string) {
	t.Helper()
	return deployedStackServing(t, demo.Tools(), mutate...)
}

// deployedStackServing is deployedStack with a demo worker serving tools.
func deployedStackServing(t *testing.T, tools []worker.Tool, mutate ...func(*coordinator.Config)) (string, string) {
	t.Helper()
	deploy, err := filepath.Abs(filepath.Join("..", "..", "deploy", "nats"))
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.ServerWith(t, natsserver.Config{ConfigFile: filepath.Join(deploy, "users.conf")})
	ids, err := coordinator.LoadIdentities(filepath.Join(deploy, "identities.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	as := func(user, password string) *nats.Conn {
		return testenv.Connect(t, srv.URL(), nats.UserInfo(user, password), nats.CustomInboxPrefix(natsflags.InboxPrefix(user)))
	}
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator", "coordinator-secret")
		cfg.Identities = ids
		for _, m := range mutate {
			m(cfg)
		}
	})
	testenv.Worker(t, "", worker.Config{Conn: as("worker_demo", "worker-demo-secret")}, worker.Namespace{Name: demo.Name, Tools: tools})
	return srv.URL(), testenv.Binary(t, "./cmd/toolbus")
}

// The command line works as a deployment's agent user: it connects as the
// user, receives replies on the user's inbox prefix and results on its
// route, reads calls through the coordinator, and is refused another
// user's calls.
func TestCommandLineAsADeployedAgent(t *testing.T) {
	t.Parallel()
	url, bin := deployedStack(t)
	agentA := []string{"--user", "agent_a", "--password", "agent-a-secret", "--route", "agentAroute00000000001"}
	stdout, stderr, status := cli(t, bin, url, append(agentA, "--json", "call", "demo-echo", `{"text":"hi"}`)...)
	if status != exitOK {
		t.Fatalf("call as agent_a: exit status %d\n%s%s", status, stdout, stderr)
	}
	var res messages.CallResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.CallID == "" || res.IsError {
		t.Fatalf("call as agent_a: %q (%v)", stdout, err)
	}
	stdout, stderr, status = cli(t, bin, url, append(agentA, "--json", "calls", "get", res.CallID)...)
	if status != exitOK || !strings.Contains(stdout, `"completed"`) {
		t.Fatalf("calls get as agent_a: exit status %d\n%s%s", status, stdout, stderr)
	}
	stdout, stderr, status = cli(t, bin, url, append(agentA, "calls", "watch", res.CallID)...)
	if status != exitOK {
		t.Fatalf("calls watch as agent_a: exit status %d\n%s%s", status, stdout, stderr)
	}
	agentB := []string{"--user", "agent_b", "--password", "agent-b-secret", "--agent", "billing-bot"}
	stdout, _, status = cli(t, bin, url, append(agentB, "--json", "calls", "get", res.CallID)...)
	if status != exitRequestFailed || !strings.Contains(stdout, string(messages.CodeForbidden)) {
		t.Fatalf("calls get of agent_a's call as agent_b: exit status %d\n%s", status, stdout)
	}
	// Without its route, a deployed agent's call still completes: it waits through the coordinator.
	stdout, stderr, status = cli(t, bin, url, append(agentB, "call", "demo-echo", `{"text":"b"}`)...)
	if status != exitOK {
		t.Fatalf("call as agent_b without a route: exit status %d\n%s%s", status, stdout, stderr)
	}
}

// A deployed agent's `calls get --full` shows a result cut to its tool's
// size limit whole, read through the coordinator (its account has no
// JetStream); without --full it shows the cut one.
func TestCallsGetFullReadsACutResultWhole(t *testing.T) {
	t.Parallel()
	whole := strings.Repeat("all of it ", 120_000) // 1.2 MB: more than one page
	big := worker.Func("big", "Returns a lot.", func(ctx context.Context, in struct{}) (string, error) { return whole, nil }, worker.WithMaxResultSize(1000))
	url, bin := deployedStackServing(t, append(demo.Tools(), big))
	agentA := []string{"--user", "agent_a", "--password", "agent-a-secret", "--route", "agentAroute00000000001"}
	stdout, stderr, status := cli(t, bin, url, append(agentA, "--json", "call", "demo-big", `{}`)...)
	var res messages.CallResult
	if err := json.Unmarshal([]byte(stdout), &res); status != exitOK || err != nil || !res.Truncated {
		t.Fatalf("call as agent_a: exit status %d (%v)\n%.300s%s", status, err, stdout, stderr)
	}
	for _, full := range []bool{false, true} {
		args := append(agentA, "--json", "calls", "get", res.CallID)
		if full {
			args = append(agentA, "--json", "calls", "get", "--full", res.CallID)
		}
		stdout, stderr, status = cli(t, bin, url, args...)
		var info messages.CallInfo
		if err := json.Unmarshal([]byte(stdout), &info); status != exitOK || err != nil || info.Result == nil || len(info.Result.Content) != 1 {
			t.Fatalf("calls get (full %v): exit status %d (%v)\n%.300s%s", full, status, err, stdout, stderr)
		}
		if got := info.Result.Content[0].Text; (got == whole) != full || info.Result.Truncated == full {
			t.Fatalf("calls get (full %v): a result of %d bytes, truncated %v", full, len(got), info.Result.Truncated)
		}
	}
}

// TestDeployedAgentWithoutARoute: with identities, an agent's user that
// names no route calls with --watch and --detach as a plain call does,
// with no refused subscription, and a wrong password is named as such.
func TestDeployedAgentWithoutARoute(t *testing.T) {
	t.Parallel()
	url, bin := deployedStack(t)
	agentB := []string{"--user", "agent_b", "--password", "agent-b-secret", "--agent", "billing-bot"}
	stdout, stderr, status := cli(t, bin, url, append(agentB, "call", "--watch", "demo-echo", `{"text":"watched"}`)...)
	if status != exitOK || strings.TrimSpace(stdout) != "watched" || strings.Contains(stderr, "permissions violation") || strings.Contains(stderr, "forbidden") {
		t.Fatalf("call --watch without a route: exit status %d\n%s%s", status, stdout, stderr)
	}
	stdout, stderr, status = cli(t, bin, url, append(agentB, "call", "--detach", "demo-echo", `{"text":"later"}`)...)
	id := strings.TrimSpace(stdout)
	if status != exitOK || id == "" || strings.Contains(stderr, "permissions violation") {
		t.Fatalf("call --detach without a route: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status = cli(t, bin, url, append(agentB, "calls", "watch", id)...); status != exitOK || strings.TrimSpace(stdout) != "later" {
		t.Fatalf("calls watch of the detached call: exit status %d\n%s%s", status, stdout, stderr)
	}

	_, stderr, status = cli(t, bin, url, "--user", "agent_b", "--password", "not-the-password", "tools")
	if status != exitRequestFailed || !strings.Contains(stderr, "refused user agent_b's credentials") || strings.Contains(stderr, "is Toolbus running") {
		t.Fatalf("a wrong password: exit status %d\n%s", status, stderr)
	}
}
