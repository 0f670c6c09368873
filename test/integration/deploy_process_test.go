package integration

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestCommandsRunWithTheDeployUsers starts the coordinator, worker and
// indexer commands as the users of the deploy configuration, as an
// operator would, and makes a call and a discovery through them: each
// command has what its user is allowed, inbox prefix included.
func TestCommandsRunWithTheDeployUsers(t *testing.T) {
	t.Parallel()
	srv := testenv.ServerWith(t, natsserver.Config{ConfigFile: deployWithNamespace(t, "payments")})
	url := srv.URL()
	coordinator := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", url, "--user", "coordinator", "--password", "coordinator-secret", "--identities", filepath.Join(deployDir(t), "identities.yaml"), "--metrics-listen", "127.0.0.1:0")
	probes := []string{metricsAddr(t, coordinator)}
	coordinator.WaitLine(t, "coordinator started")
	worker := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", url, "--user", "worker_demo", "--password", "worker-demo-secret", "--demo", "--id", "w1", "--metrics-listen", "127.0.0.1:0")
	probes = append(probes, metricsAddr(t, worker))
	worker.WaitLine(t, "worker w1 ready")
	indexer := testenv.Start(t, testenv.Binary(t, "./cmd/indexer"), "--server", url, "--user", "indexer", "--password", "indexer-secret", "--write-interval", "20ms", "--metrics-listen", "127.0.0.1:0")
	probes = append(probes, metricsAddr(t, indexer))
	// The lease may be logged before or after "indexer started"; the
	// indexer is ready once it has started.
	indexer.WaitLine(t, "index lease taken")
	// Each is ready with only its user's permissions.
	for _, addr := range probes {
		awaitStatus(t, "http://"+addr+"/readyz", http.StatusOK)
	}

	c := agentClient(t, testenv.Connect(t, url, deployUser("agent_a", "agent-a-secret")...), "support-bot")
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, "demo-word_count", map[string]string{"text": "three little words"})
	if err != nil || res.Status != messages.StateCompleted || res.Worker != "w1" {
		t.Fatalf("call: %+v %v", res, err)
	}
	found, err := c.Discover(ctx, messages.DiscoverRequest{Query: "count words", Turn: "turn-1"})
	if err != nil || len(found.Tools) == 0 {
		t.Fatalf("discover: %+v %v", found, err)
	}
	for _, p := range []*testenv.Process{coordinator, worker, indexer} {
		if out := p.Output(); strings.Contains(strings.ToLower(out), "permissions violation") {
			t.Fatalf("a command hit a permission it needs:\n%s", out)
		}
	}
}
