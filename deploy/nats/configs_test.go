package nats

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// deployAccounts is the account of every user the configurations that
// include users.inc define: the coordinator and the other services in
// TOOLBUS, each namespace's workers in an account of their own, agents
// and operators in AGENTS, and nobody in the default account.
var deployAccounts = map[string]string{
	"coordinator": "TOOLBUS", "indexer": "INDEXER", "auditor": "AUDITOR", "worker_demo": "WORKER_DEMO",
	"agent_a": "AGENTS", "agent_b": "AGENTS", "operator": "AGENTS",
}

func configFiles(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("*.conf")
	cluster, _ := filepath.Glob("cluster/*.conf")
	files = append(files, cluster...)
	if len(files) != 5 {
		t.Fatalf("found %v", files)
	}
	return files
}

// TestConfigsLoad parses every server configuration and checks that each
// but dev.conf puts every user in an account, the services in TOOLBUS and
// the agents and operators in AGENTS: no user of the default account can
// name any agent it likes.
func TestConfigsLoad(t *testing.T) {
	for _, f := range configFiles(t) {
		opts, err := server.ProcessConfigFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if !opts.JetStream {
			t.Errorf("%s: JetStream is off", f)
		}
		if f == "dev.conf" {
			continue
		}
		checkAccounts(t, f, opts)
		if filepath.Dir(f) == "cluster" && (opts.Cluster.Name != "toolbus" || len(opts.Routes) != 3) {
			t.Errorf("%s: cluster %q with %d routes", f, opts.Cluster.Name, len(opts.Routes))
		}
	}
}

func checkAccounts(t *testing.T, file string, opts *server.Options) {
	t.Helper()
	accounts := map[string]string{}
	for _, u := range opts.Users {
		if u.Permissions == nil || u.Account == nil {
			t.Errorf("%s: user %s without permissions or account", file, u.Username)
			continue
		}
		accounts[u.Username] = u.Account.Name
	}
	if len(accounts) != len(deployAccounts) {
		t.Errorf("%s: users %v, want those of %v", file, accounts, deployAccounts)
	}
	for user, account := range deployAccounts {
		if accounts[user] != account {
			t.Errorf("%s: user %s in account %q, want %s", file, user, accounts[user], account)
		}
	}
}

// TestConfigsStartAndShareTheCaller starts a server with each
// configuration that includes users.inc (a cluster node's alone, its
// cluster and monitoring left out, on a free port) and checks that the
// permission blocks users.inc defines apply inside its accounts block: the
// coordinator's user has JetStream, an agent's user has none, and an
// agent's API request reaches the coordinator's account with the
// Nats-Request-Info the server wrote, naming the agent's user.
func TestConfigsStartAndShareTheCaller(t *testing.T) {
	for _, f := range configFiles(t) {
		if f == "dev.conf" {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			opts, err := server.ProcessConfigFile(f)
			if err != nil {
				t.Fatal(err)
			}
			opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", server.RANDOM_PORT, 0
			opts.Cluster = server.ClusterOpts{}
			opts.Routes = nil
			opts.StoreDir = t.TempDir()
			opts.NoSigs, opts.NoLog = true, true
			srv, err := server.NewServer(opts)
			if err != nil {
				t.Fatal(err)
			}
			srv.Start()
			t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
			if !srv.ReadyForConnections(2 * time.Minute) {
				t.Fatal("the server did not start")
			}
			connect := func(user, password string) *nats.Conn {
				nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, password), nats.CustomInboxPrefix("_INBOX_"+user))
				if err != nil {
					t.Fatalf("connect as %s: %v", user, err)
				}
				t.Cleanup(nc.Close)
				return nc
			}
			coordinator := connect("coordinator", "coordinator-secret")
			if _, err := coordinator.Request("$JS.API.INFO", nil, time.Minute); err != nil {
				t.Fatalf("the coordinator has no JetStream: %v", err)
			}
			sub, err := coordinator.Subscribe("toolbus.api.tools.list", func(m *nats.Msg) {
				_ = m.Respond([]byte(m.Header.Get("Nats-Request-Info")))
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := coordinator.Flush(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			// A namespace's worker reaches TOOLBUS's JetStream through its
			// account's imports, and is answered by it alone: its account
			// has no import of the server's own, which answers every
			// JetStream request of an account without JetStream, and would
			// answer the worker's too.
			accz, err := srv.Accountz(&server.AccountzOptions{Account: "WORKER_DEMO"})
			if err != nil || accz.Account == nil {
				t.Fatalf("account WORKER_DEMO: %+v %v", accz, err)
			}
			for _, imp := range accz.Account.Imports {
				if imp.Account != "TOOLBUS" && strings.HasPrefix(string(imp.Subject), "$JS.") {
					t.Errorf("WORKER_DEMO imports %s from %s", imp.Subject, imp.Account)
				}
			}
			worker := connect("worker_demo", "worker-demo-secret")
			if reply, err := worker.Request("$JS.API.INFO", nil, time.Minute); err != nil || strings.Contains(string(reply.Data), `"error"`) {
				t.Fatalf("the demo worker's JetStream request: %v %s", err, reply.Data)
			}
			agent := connect("agent_a", "agent-a-secret")
			forged := nats.NewMsg("toolbus.api.tools.list")
			forged.Header.Set("Nats-Request-Info", `{"acc":"AGENTS","user":"agent_b"}`)
			reply, err := agent.RequestMsg(forged, time.Minute)
			if err != nil {
				t.Fatalf("an agent's API request: %v", err)
			}
			var info struct {
				Account string `json:"acc"`
				User    string `json:"user"`
			}
			if err := json.Unmarshal(reply.Data, &info); err != nil || info.Account != "AGENTS" || info.User != "agent_a" {
				t.Fatalf("the coordinator saw the caller %q (%v), want AGENTS/agent_a", reply.Data, err)
			}
			reply, err = agent.Request("$JS.API.INFO", nil, time.Minute)
			if err != nil || !json.Valid(reply.Data) || string(reply.Data) == "" {
				t.Fatalf("an agent's JetStream request: %v", err)
			}
			var answer struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(reply.Data, &answer); err != nil || answer.Error == nil {
				t.Fatalf("an agent's user has JetStream: %s", reply.Data)
			}
		})
	}
}
