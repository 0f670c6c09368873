package nats

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestConfigsLoad parses every server configuration and checks the users
// each role needs are there.
func TestConfigsLoad(t *testing.T) {
	files, _ := filepath.Glob("*.conf")
	cluster, _ := filepath.Glob("cluster/*.conf")
	files = append(files, cluster...)
	if len(files) != 6 {
		t.Fatalf("found %v", files)
	}
	for _, f := range files {
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
		if f == "accounts.conf" {
			checkAccounts(t, opts)
			continue
		}
		users := map[string]*server.User{}
		for _, u := range opts.Users {
			users[u.Username] = u
		}
		for _, name := range []string{"client", "operator", "coordinator", "indexer", "worker_demo"} {
			if u := users[name]; u == nil || u.Permissions == nil {
				t.Errorf("%s: user %s missing or without permissions", f, name)
			}
		}
		if filepath.Dir(f) == "cluster" && (opts.Cluster.Name != "toolbus" || len(opts.Routes) != 3) {
			t.Errorf("%s: cluster %q with %d routes", f, opts.Cluster.Name, len(opts.Routes))
		}
	}
}

// checkAccounts checks that accounts.conf puts the services in TOOLBUS and
// the agents and operators in AGENTS.
func checkAccounts(t *testing.T, opts *server.Options) {
	t.Helper()
	accounts := map[string]string{}
	for _, u := range opts.Users {
		if u.Permissions == nil || u.Account == nil {
			t.Errorf("accounts.conf: user %s without permissions or account", u.Username)
			continue
		}
		accounts[u.Username] = u.Account.Name
	}
	for user, account := range map[string]string{"coordinator": "TOOLBUS", "indexer": "TOOLBUS", "worker_demo": "TOOLBUS", "auditor": "TOOLBUS", "agent_a": "AGENTS", "agent_b": "AGENTS", "operator": "AGENTS"} {
		if accounts[user] != account {
			t.Errorf("accounts.conf: user %s in account %q, want %s", user, accounts[user], account)
		}
	}
}

// TestAccountsKeepTheServicesPermissions: accounts.conf copies the service
// roles' permission blocks of users.inc, and the copies must not drift.
func TestAccountsKeepTheServicesPermissions(t *testing.T) {
	users, err := os.ReadFile("users.inc")
	if err != nil {
		t.Fatal(err)
	}
	accounts, err := os.ReadFile("accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	block := func(text []byte, name string) string {
		s := string(text)
		start := strings.Index(s, name+" = {")
		if start < 0 {
			return ""
		}
		return s[start : start+strings.Index(s[start:], "\n}\n")]
	}
	for _, name := range []string{"COORDINATOR_PERMISSIONS", "INDEXER_PERMISSIONS", "WORKER_DEMO_PERMISSIONS"} {
		inUsers, inAccounts := block(users, name), block(accounts, name)
		if inUsers == "" || inUsers != inAccounts {
			t.Errorf("%s differs between users.inc and accounts.conf", name)
		}
	}
}
