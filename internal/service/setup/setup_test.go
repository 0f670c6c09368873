package setup_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
)

// tree is every file and directory of an installation with its mode,
// modification time and content's digest.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		entry := fmt.Sprintf("%v %d", info.Mode(), info.ModTime().UnixNano())
		if !e.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			entry += fmt.Sprintf(" %x", sha256.Sum256(data))
		}
		out[rel] = entry
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSetupTwiceChangesNothing: a second toolbus setup with the same
// options writes nothing, and the keys, credentials and tokens are 0600 in
// directories of their owner's alone.
func TestSetupTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "toolbus")
	opts := setup.Options{Dir: dir, Namespaces: []string{"demo", "payments"}}
	in, err := setup.Setup(opts)
	if err != nil {
		t.Fatal(err)
	}
	before := tree(t, dir)
	time.Sleep(10 * time.Millisecond) // a rewritten file would show a later modification time
	if _, err := setup.Setup(opts); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Setup(setup.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	after := tree(t, dir)
	for path, was := range before {
		if after[path] != was {
			t.Errorf("%s changed: %s, now %s", path, was, after[path])
		}
	}
	for path := range after {
		if _, ok := before[path]; !ok {
			t.Errorf("%s appeared", path)
		}
	}
	secret := func(rel string) {
		info, err := os.Stat(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		if mode := info.Mode().Perm(); mode&0o077 != 0 {
			t.Errorf("%s is %v: others may read it", rel, mode)
		}
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "keys", "*.nk"))
	creds, _ := filepath.Glob(filepath.Join(dir, "creds", "*.creds"))
	if len(keys) != 8 || len(creds) != 8 {
		t.Fatalf("%d keys (operator, 7 accounts) and %d credentials (coordinator, indexer, auditor, sys, admin, mcp, 2 workers)", len(keys), len(creds))
	}
	for _, f := range append(append(keys, creds...), in.ConsoleTokens(), in.MCPTokens()) {
		rel, _ := filepath.Rel(dir, f)
		secret(rel)
	}
	for _, d := range []string{".", "keys", "creds"} {
		secret(d)
	}
}

// TestSetupNeverOverwritesAKey: a key the installation knows but cannot
// read stops setup with the file named, and a missing credentials file is
// issued again, under a new user key, without touching the others.
func TestSetupNeverOverwritesAKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, err := setup.Setup(setup.Options{Dir: dir, Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	st := in.State()
	indexer, _ := os.ReadFile(in.CredsFile("indexer"))
	if err := os.Remove(in.CredsFile("indexer")); err != nil {
		t.Fatal(err)
	}
	before := tree(t, filepath.Join(dir, "keys"))
	again, err := setup.Setup(setup.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if reissued, _ := os.ReadFile(in.CredsFile("indexer")); len(reissued) == 0 || string(reissued) == string(indexer) {
		t.Fatal("the indexer's credentials were not issued again")
	}
	if again.State().Users["indexer"] == st.Users["indexer"] {
		t.Error("the indexer's new credentials have the old user key")
	}
	after := tree(t, filepath.Join(dir, "keys"))
	if len(after) != len(before) {
		t.Errorf("keys %v, then %v", before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("key %s changed", k)
		}
	}
	op := filepath.Join(dir, "keys", st.Operator+".nk")
	if err := os.Rename(op, op+".aside"); err != nil {
		t.Fatal(err)
	}
	_, err = setup.Setup(setup.Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), "restore it") {
		t.Fatalf("setup without the operator's key: %v", err)
	}
	if _, err := os.Stat(op); err == nil {
		t.Fatal("setup made another operator key")
	}
}

// TestSetupRefusesBadInput: what cannot make an installation is refused,
// naming what is wrong, and an installation is not changed by options
// that would make another one.
func TestSetupRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		opts setup.Options
		want string
	}{
		{setup.Options{}, "--dir"},
		{setup.Options{Dir: dir, Nodes: 2}, "--nodes 2"},
		{setup.Options{Dir: dir, Listen: "4222"}, "--listen"},
		{setup.Options{Dir: dir, Namespaces: []string{"no.dots"}}, "namespace"},
	} {
		if _, err := setup.Setup(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want one naming %s", c.opts, err, c.want)
		}
	}
	in, err := setup.Setup(setup.Options{Dir: dir, Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Setup(setup.Options{Dir: dir, Nodes: 3}); err == nil || !strings.Contains(err.Error(), "1 node") {
		t.Errorf("a second setup with --nodes 3: %v", err)
	}
	if _, err := in.AddNamespace("demo"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("demo added twice: %v", err)
	}
	if _, err := in.AddNamespace("DEMO"); err == nil || !strings.Contains(err.Error(), "WORKER_DEMO") {
		t.Errorf("DEMO beside demo: %v", err)
	}
	for _, c := range []struct {
		name string
		opts setup.AgentOptions
		want string
	}{
		{"bot", setup.AgentOptions{ActsAs: []string{">"}}, "subject wildcard"},
		{"bot", setup.AgentOptions{ActsAs: []string{"team.>"}}, "subject wildcard"},
		{"bot", setup.AgentOptions{ActsAs: []string{"*"}}, "every agent"},
		{"bot", setup.AgentOptions{ActsAs: []string{"*?*"}}, "every agent"},
		{"bot", setup.AgentOptions{ActsAs: []string{"a b"}}, "agent pattern"},
		{"bot", setup.AgentOptions{Route: "short"}, "route"},
		{"coordinator", setup.AgentOptions{}, "service"},
		{"worker_demo", setup.AgentOptions{}, "service"},
		{"a.b", setup.AgentOptions{}, "letters"},
		{"admin", setup.AgentOptions{}, "exists"},
	} {
		if _, err := in.AddAgent(c.name, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("agent %s %+v: err = %v, want one saying %q", c.name, c.opts, err, c.want)
		}
	}
	if _, err := os.Stat(in.CredsFile("bot")); err == nil {
		t.Error("a refused agent has credentials")
	}
	if _, err := in.RevokeAgent("nobody"); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Errorf("revoking nobody: %v", err)
	}
	if _, err := in.RemoveNamespace("nothing"); err == nil || !strings.Contains(err.Error(), "nothing") {
		t.Errorf("removing nothing: %v", err)
	}
	for _, s := range []string{"0", "-1h", "soon", "d", "0d"} {
		if _, err := setup.ParseExpiry(s); err == nil {
			t.Errorf("expiry %q accepted", s)
		}
	}
	if d, err := setup.ParseExpiry("30d"); err != nil || d != 30*24*time.Hour {
		t.Errorf("30d: %v %v", d, err)
	}
}

// TestCredentialsAreReadable: every credentials file setup writes is one
// the commands read, named as its user.
func TestCredentialsAreReadable(t *testing.T) {
	t.Parallel()
	in, err := setup.Setup(setup.Options{Dir: t.TempDir(), Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"coordinator", "indexer", "auditor", "sys", "admin", "mcp", "worker_demo"} {
		if name, err := natsflags.CredsUser(in.CredsFile(user)); err != nil || name != user {
			t.Errorf("%s's credentials: %q %v", user, name, err)
		}
	}
}

// grants is what a server says of one account: its imports of TOOLBUS and
// its exports, each as a line.
func grants(t *testing.T, srv *natsserver.Server, account string, names map[string]string) []string {
	t.Helper()
	accz, err := srv.Accountz(&server.AccountzOptions{Account: account})
	if err != nil || accz.Account == nil {
		t.Fatalf("account %s: %+v %v", account, accz, err)
	}
	var out []string
	for _, imp := range accz.Account.Imports {
		from := names[imp.Account]
		if from == "" {
			from = imp.Account
		}
		if from != "TOOLBUS" {
			continue // the server's own imports, as in every account
		}
		out = append(out, fmt.Sprintf("import %s %s from %s share=%v", imp.Type, imp.Subject, from, imp.Share))
	}
	for _, exp := range accz.Account.Exports {
		restricted := exp.TokenReq || len(exp.ApprovedAccounts) > 0
		out = append(out, fmt.Sprintf("export %s %s response=%s restricted=%v", exp.Type, exp.Subject, exp.ResponseType, restricted))
	}
	sort.Strings(out)
	return out
}

// TestGrantsAreThoseOfUsersInc: the accounts and users toolbus setup
// signs grant exactly what deploy/nats/users.inc grants: a server started
// with users.conf and one started with setup's configuration hold the
// same imports and exports for each account (only AGENTS may import the
// API and the routed results, from the one account TOOLBUS), and each
// service user has the same permissions; an agent's user has its own
// inbox and route, as users.inc's agent_a.
func TestGrantsAreThoseOfUsersInc(t *testing.T) {
	t.Parallel()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	deploy := filepath.Join(filepath.Dir(strings.TrimSpace(string(root))), "deploy", "nats")
	static := testenv.ServerWith(t, natsserver.Config{ConfigFile: filepath.Join(deploy, "users.conf")})

	in, err := setup.Setup(setup.Options{Dir: t.TempDir(), Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := in.AddAgent("agent_a", setup.AgentOptions{ActsAs: []string{"support-bot"}, Route: "agentAroute00000000001"})
	if err != nil {
		t.Fatal(err)
	}
	signed := testenv.InstallationServer(t, in)
	st := in.State()
	names := map[string]string{}
	for name, pub := range st.Accounts {
		names[pub] = name
	}
	accounts := map[string]string{"TOOLBUS": st.Accounts["TOOLBUS"], "AGENTS": st.Accounts["AGENTS"], "INDEXER": st.Accounts["INDEXER"], "AUDITOR": st.Accounts["AUDITOR"], "WORKER_DEMO": st.Namespaces["demo"].Account}
	for name, pub := range accounts {
		// The resolver loads an account when it is first used.
		if _, err := signed.LookupAccount(pub); err != nil {
			t.Fatalf("account %s: %v", name, err)
		}
		want := grants(t, static, name, nil)
		got := grants(t, signed, pub, names)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("account %s:\nusers.inc grants %d:\n  %s\nsetup grants %d:\n  %s", name, len(want), strings.Join(want, "\n  "), len(got), strings.Join(got, "\n  "))
		}
	}

	opts, err := server.ProcessConfigFile(filepath.Join(deploy, "users.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range opts.Users {
		file := in.CredsFile(u.Username)
		if u.Username == "agent_a" {
			if agent.Routes[0] != "agentAroute00000000001" {
				t.Fatalf("agent_a's route %v", agent.Routes)
			}
		} else if _, err := os.Stat(file); err != nil {
			continue // agent_b and operator: agent_a stands for every agent's user
		}
		claims, err := natsflags.ReadCreds(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			what      string
			want, got []string
		}{
			{"publish", u.Permissions.Publish.Allow, claims.Pub.Allow},
			{"subscribe", u.Permissions.Subscribe.Allow, claims.Sub.Allow},
		} {
			want, got := slices.Clone(p.want), slices.Clone(p.got)
			sort.Strings(want)
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("user %s may %s:\nusers.inc: %v\nsetup:     %v", u.Username, p.what, want, got)
			}
		}
		if len(u.Permissions.Publish.Deny) > 0 || len(u.Permissions.Subscribe.Deny) > 0 || len(claims.Pub.Deny) > 0 || len(claims.Sub.Deny) > 0 {
			t.Errorf("user %s: deny lists", u.Username)
		}
	}
}

// TestThreeNodesTakeAChangeLive: the three nodes of an installation made
// with --nodes 3 form one cluster; a namespace added and an agent revoked
// are pushed to the three nodes' resolvers, each of which then accepts
// the new namespace's worker and refuses the revoked user, with no
// restart.
func TestThreeNodesTakeAChangeLive(t *testing.T) {
	t.Parallel()
	in, err := setup.Setup(setup.Options{Dir: t.TempDir(), Nodes: 3, Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.AddAgent("bot", setup.AgentOptions{}); err != nil {
		t.Fatal(err)
	}
	bot, err := os.ReadFile(in.CredsFile("bot"))
	if err != nil {
		t.Fatal(err)
	}
	ports := testenv.FreePorts(t, 3)
	var urls []string
	for i := range 3 {
		conf := filepath.Join(t.TempDir(), fmt.Sprintf("n%d.conf", i+1))
		if err := in.WriteNodeConfig(i, conf, setup.NodePaths{Store: t.TempDir(), ClusterPorts: ports}); err != nil {
			t.Fatal(err)
		}
		srv := testenv.ServerWith(t, natsserver.Config{ConfigFile: conf})
		if got := srv.Name(); got != fmt.Sprintf("toolbus-n%d", i+1) {
			t.Errorf("node %d is %s", i+1, got)
		}
		urls = append(urls, srv.URL())
	}
	// Each node routes to the other two before the change.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sys, err := nats.Connect(urls[0], nats.UserCredentials(in.CredsFile("sys")))
		if err != nil {
			t.Fatal(err)
		}
		replies := 0
		inbox := nats.NewInbox()
		sub, _ := sys.SubscribeSync(inbox)
		_ = sys.PublishRequest("$SYS.REQ.SERVER.PING", inbox, nil)
		for {
			if _, err := sub.NextMsg(500 * time.Millisecond); err != nil {
				break
			}
			replies++
		}
		sys.Close()
		if replies == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 nodes answer through the cluster", replies)
		}
	}

	change, err := in.AddNamespace("payments")
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := in.PushTo(testContext(t), strings.Join(urls, ","), change)
	if err != nil || len(pushed.Servers) != 3 || pushed.Nodes != 3 {
		t.Fatalf("namespace add pushed to %+v: %v", pushed, err)
	}
	for _, u := range urls {
		nc, err := nats.Connect(u, nats.UserCredentials(in.CredsFile("worker_payments")))
		if err != nil {
			t.Fatalf("the new namespace's worker at %s: %v", u, err)
		}
		nc.Close()
	}
	change, err = in.RevokeAgent("bot")
	if err != nil {
		t.Fatal(err)
	}
	if pushed, err := in.PushTo(testContext(t), strings.Join(urls, ","), change); err != nil || len(pushed.Servers) != 3 {
		t.Fatalf("agent revoke pushed to %+v: %v", pushed, err)
	}
	kept := filepath.Join(t.TempDir(), "bot.creds")
	if err := os.WriteFile(kept, bot, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		if nc, err := nats.Connect(u, nats.UserCredentials(kept)); err == nil {
			nc.Close()
			t.Errorf("the revoked user was accepted at %s", u)
		}
	}
}

// testContext ends with the test, or after five minutes: time for a
// test's whole work on a busy machine.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestAnotherPrefix: with another prefix every grant names the prefix's
// subjects and resources, and a namespace keeps its name even when it
// holds "toolbus".
func TestAnotherPrefix(t *testing.T) {
	t.Parallel()
	in, err := setup.Setup(setup.Options{Dir: t.TempDir(), Prefix: "acme", Namespaces: []string{"toolbus_ns"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"coordinator", "indexer", "auditor", "admin"} {
		claims, err := natsflags.ReadCreds(in.CredsFile(user))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append(claims.Pub.Allow, claims.Sub.Allow...) {
			if strings.Contains(strings.ToLower(s), "toolbus") {
				t.Errorf("%s may use %s", user, s)
			}
		}
	}
	claims, err := natsflags.ReadCreds(in.CredsFile("worker_toolbus_ns"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"acme.events.*.*.result.toolbus_ns", "$O.acme_results_toolbus_ns.>", "$JS.ACK.ACME_EVENTS.ns_toolbus_ns.>"} {
		if !slices.Contains(claims.Pub.Allow, want) {
			t.Errorf("the worker may not publish %s: %v", want, claims.Pub.Allow)
		}
	}
}
