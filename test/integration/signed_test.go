package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// liveInstallation is a signed installation of its own (the tests below
// change it), with the deploy configuration's users, a server, a
// coordinator without an identities file and the demo worker.
func liveInstallation(t *testing.T) *deployed {
	t.Helper()
	in, err := newSignedInstallation(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The installation's own node configuration, on a free port: Push
	// reaches the server at the address the installation lists.
	srv := testenv.InstallationServer(t, in)
	d := &deployed{kind: signed, srv: srv, url: srv.URL(), in: in}
	testenv.Coordinator(t, d.url, func(cfg *coordinator.Config) { cfg.Conn = d.as(t, "coordinator") })
	testenv.Worker(t, "", worker.Config{Conn: d.as(t, "worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	return d
}

// push sends a change to the test's server: the installation lists the
// address of its own configuration, the test's server listens elsewhere.
func (d *deployed) push(t *testing.T, change setup.Change) {
	t.Helper()
	nc := testenv.Connect(t, d.url, nats.UserCredentials(d.in.CredsFile("sys")))
	for _, token := range change.AccountJWTs {
		reply, err := nc.Request("$SYS.REQ.CLAIMS.UPDATE", []byte(token), testenv.Patience)
		if err != nil || !strings.Contains(string(reply.Data), "jwt updated") {
			t.Fatalf("push: %v %s", err, reply.Data)
		}
	}
}

// callsInBackground makes calls of demo-echo as agent_a until stopped,
// and counts those that did not complete.
type callsInBackground struct {
	done, failed atomic.Int64
	firstErr     atomic.Value
	stop         func()
}

func runCallsInBackground(t *testing.T, c *client.Client) *callsInBackground {
	bg := &callsInBackground{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "meanwhile"})
			if ctx.Err() != nil {
				return
			}
			if err != nil || res.Status != messages.StateCompleted {
				bg.failed.Add(1)
				bg.firstErr.CompareAndSwap(nil, errors.Join(err, errors.New(string(res.Status))))
				continue
			}
			bg.done.Add(1)
		}
	})
	bg.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(bg.stop)
	return bg
}

// TestNamespaceAddedWhileCallsRun: while an agent's calls of namespace
// demo run, namespace payments is added (toolbus namespace add: its
// account pushed to the running server's resolver) and a worker started
// with its new credentials serves the first payments call, with no
// restart of the server or the coordinator, and none of the demo calls
// fails. Then the namespace is removed: its worker is disconnected, its
// credentials are refused, and the demo calls go on.
func TestNamespaceAddedWhileCallsRun(t *testing.T) {
	t.Parallel()
	in, err := setup.Setup(setup.Options{Dir: t.TempDir(), Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.AddAgent("agent_a", setup.AgentOptions{ActsAs: []string{"support-bot"}, Route: deployRoutes["agent_a"]}); err != nil {
		t.Fatal(err)
	}
	srv := testenv.InstallationServer(t, in)
	d := &deployed{kind: signed, srv: srv, url: srv.URL(), in: in}
	testenv.Coordinator(t, d.url, func(cfg *coordinator.Config) { cfg.Conn = d.as(t, "coordinator") })
	testenv.Worker(t, "", worker.Config{Conn: d.as(t, "worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	a := agentClient(t, d.as(t, "agent_a"), "support-bot")
	bg := runCallsInBackground(t, a)
	testenv.Eventually(t, "the demo calls to run", func() bool { return bg.done.Load() > 0 })

	if _, err := os.Stat(in.CredsFile("worker_payments")); err == nil {
		t.Fatal("credentials of payments before it was added")
	}
	added := time.Now()
	change, err := in.AddNamespace("payments")
	if err != nil {
		t.Fatal(err)
	}
	d.push(t, change)
	count := newCounter()
	workerConn := d.as(t, "worker_payments")
	testenv.Worker(t, "", worker.Config{Conn: workerConn}, worker.Namespace{Name: "payments", Tools: []worker.Tool{count.tool()}})
	var res *messages.CallResult
	testenv.Eventually(t, "the first payments call served", func() bool {
		res, err = a.Call(ctx, "payments-count", map[string]string{"label": "first"})
		return err == nil
	})
	served := time.Since(added)
	if res.Status != messages.StateCompleted || count.total.Load() != 1 {
		t.Fatalf("the first payments call: %+v, %d runs", res, count.total.Load())
	}
	t.Logf("namespace add (keys, JWTs, push) to the first call served: %v", served.Round(time.Millisecond))

	// Removed: its worker is disconnected, and its credentials refused.
	creds, err := os.ReadFile(in.CredsFile("worker_payments"))
	if err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(t.TempDir(), "worker_payments.creds")
	if err := os.WriteFile(kept, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	paymentsConn := testenv.Connect(t, d.url, nats.UserCredentials(kept), nats.NoReconnect(), nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
		select {
		case closed <- err:
		default:
		}
	}))
	change, err = in.RemoveNamespace("payments")
	if err != nil {
		t.Fatal(err)
	}
	d.push(t, change)
	receive(t, closed, "the removed namespace's connection to be closed")
	if paymentsConn.IsConnected() {
		t.Fatal("a connection of the removed namespace is still connected")
	}
	testenv.Eventually(t, "the removed namespace's worker to be disconnected", func() bool { return !workerConn.IsConnected() })
	workerConn.Close() // it would try to reconnect for ever
	if nc, err := nats.Connect(d.url, nats.UserCredentials(kept)); err == nil {
		nc.Close()
		t.Fatal("the removed namespace's credentials were accepted")
	}
	if _, err := os.Stat(in.CredsFile("worker_payments")); err == nil {
		t.Error("the removed namespace's credentials are still in the installation")
	}
	before := bg.done.Load()
	testenv.Eventually(t, "demo calls after the removal", func() bool { return bg.done.Load() > before+2 })
	bg.stop()
	if n := bg.failed.Load(); n > 0 {
		t.Fatalf("%d demo calls failed while namespaces were added and removed: %v", n, bg.firstErr.Load())
	}
}

// TestAgentRevokedWhileCallsRun: agent B's user is revoked while A's and
// B's calls run (toolbus agent revoke: AGENTS's JWT, with B's key revoked,
// pushed): B's connection is closed and its credentials refused from the
// moment the server has the update, and A's calls go on; nothing
// restarts.
func TestAgentRevokedWhileCallsRun(t *testing.T) {
	t.Parallel()
	d := liveInstallation(t)
	creds, err := os.ReadFile(d.in.CredsFile("agent_b"))
	if err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(t.TempDir(), "agent_b.creds")
	if err := os.WriteFile(kept, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	a := agentClient(t, d.as(t, "agent_a"), "support-bot")
	closed := make(chan error, 1)
	connB := testenv.Connect(t, d.url, nats.UserCredentials(kept), nats.CustomInboxPrefix("_INBOX_agent_b"), nats.Name("agent_b"), nats.NoReconnect(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			select {
			case closed <- err:
			default:
			}
		}))
	b := agentClient(t, connB, "billing-bot")
	bgA := runCallsInBackground(t, a)
	ctx := testenv.Context(t)
	if res, err := b.Call(ctx, "demo-echo", map[string]string{"text": "before"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("B before its revocation: %+v %v", res, err)
	}
	testenv.Eventually(t, "A's calls to run", func() bool { return bgA.done.Load() > 0 })

	change, err := d.in.RevokeAgent("agent_b")
	if err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	d.push(t, change)
	// The server revoked B when it stored the update, before it answered.
	if nc, err := nats.Connect(d.url, nats.UserCredentials(kept)); err == nil {
		nc.Close()
		t.Fatal("the revoked user's credentials were accepted")
	} else if !strings.Contains(strings.ToLower(err.Error()), "revoked") && !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("the revoked user's connection was refused with %v", err)
	}
	receive(t, closed, "the revoked user's connection to be closed")
	t.Logf("revoked user disconnected %v after the revocation (%v)", time.Since(revoked).Round(time.Millisecond), connB.LastError())
	if _, err := b.Call(ctx, "demo-echo", map[string]string{"text": "after"}); err == nil {
		t.Fatal("the revoked user's call was served")
	}
	before := bgA.done.Load()
	testenv.Eventually(t, "A's calls after B's revocation", func() bool { return bgA.done.Load() > before+2 })
	bgA.stop()
	if n := bgA.failed.Load(); n > 0 {
		t.Fatalf("%d of A's calls failed while B was revoked: %v", n, bgA.firstErr.Load())
	}
	if _, err := natsflags.ReadCreds(d.in.CredsFile("agent_b")); err == nil {
		t.Error("the revoked user's credentials are still in the installation")
	}
}

// TestExpiredUserIsRefused: an agent's user issued with --expires is
// served until its credentials expire, then disconnected by the server,
// and refused at its next connection; a user JWT that has expired already
// is refused at once.
func TestExpiredUserIsRefused(t *testing.T) {
	t.Parallel()
	d := liveInstallation(t)
	// Time for a connection and a call before expiry on a busy machine.
	if _, err := d.in.AddAgent("shortlived", setup.AgentOptions{ActsAs: []string{"support-bot"}, Expires: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	nc := testenv.Connect(t, d.url, nats.UserCredentials(d.in.CredsFile("shortlived")), nats.CustomInboxPrefix("_INBOX_shortlived"), nats.NoReconnect(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			select {
			case closed <- err:
			default:
			}
		}))
	c, err := client.New(nc, client.Options{Agent: "support-bot", CoordinatorReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Call(testenv.Context(t), "demo-echo", map[string]string{"text": "in time"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("before expiry: %+v %v", res, err)
	}
	receive(t, closed, "the expired user's connection to be closed")
	// A JWT expires by the second: the server accepts it within the second
	// its expiry names, and refuses it from the next.
	testenv.Eventually(t, "the expired credentials to be refused", func() bool {
		nc, err := nats.Connect(d.url, nats.UserCredentials(d.in.CredsFile("shortlived")))
		if err == nil {
			nc.Close()
			return false
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "expired") {
			t.Fatalf("expired credentials refused with %v", err)
		}
		return true
	})

	// Issued already expired (by the account's key, as a hand-made JWT).
	past := signUser(t, d.in, d.in.State().Accounts["AGENTS"], "late", func(uc *jwt.UserClaims) {
		uc.Expires = time.Now().Add(-time.Minute).Unix()
		uc.Tags.Add(messages.ClaimTagAgent + "support-bot")
	})
	if nc, err := nats.Connect(d.url, nats.UserCredentials(past)); err == nil {
		nc.Close()
		t.Fatal("an expired user JWT was accepted")
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "expired") {
		t.Errorf("an expired user JWT refused with %v", err)
	}
}

// signUser writes the credentials of a user of account (public key) signed
// by the account's key, as edit says, and returns the file.
func signUser(t *testing.T, in *setup.Installation, account, name string, edit func(*jwt.UserClaims)) string {
	t.Helper()
	seed, err := os.ReadFile(filepath.Join(in.Dir(), "keys", account+".nk"))
	if err != nil {
		t.Fatal(err)
	}
	akp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return signUserWith(t, akp, name, edit)
}

func signUserWith(t *testing.T, signer nkeys.KeyPair, name string, edit func(*jwt.UserClaims)) string {
	t.Helper()
	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.Pub.Allow.Add("toolbus.api.>")
	uc.Sub.Allow.Add("_INBOX_" + name + ".>")
	edit(uc)
	token, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(file, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestUnknownSignersAndForgedCredentialsAreRefused: the server refuses a
// user JWT signed by a key its operator does not know (an account of
// another installation, a key that claims to sign for AGENTS), and one
// whose claims were altered after signing (an agent's user made an
// operator); the command line says what is wrong with a credentials file
// before connecting; what runs is not disturbed.
func TestUnknownSignersAndForgedCredentialsAreRefused(t *testing.T) {
	t.Parallel()
	d := liveInstallation(t)
	a := agentClient(t, d.as(t, "agent_a"), "support-bot")
	agents := d.in.State().Accounts["AGENTS"]
	claim := func(uc *jwt.UserClaims) { uc.Tags.Add(messages.ClaimTagOperator) }
	other, err := setup.Setup(setup.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	rogue, _ := nkeys.CreateAccount()
	var wg sync.WaitGroup
	defer wg.Wait()
	for what, creds := range map[string]string{
		"an account of another installation":   signUser(t, other, other.State().Accounts["AGENTS"], "stranger", claim),
		"an account the operator never signed": signUserWith(t, rogue, "rogue", claim),
		"a key that says it signs for AGENTS": signUserWith(t, rogue, "impostor", func(uc *jwt.UserClaims) {
			claim(uc)
			uc.IssuerAccount = agents
		}),
	} {
		// The server asks its resolver's peers for an account it does not
		// know before it refuses it.
		wg.Go(func() {
			nc, err := nats.Connect(d.url, nats.UserCredentials(creds), nats.Timeout(30*time.Second))
			// A server still asking its peers after its first ping's delay
			// (2 s) pings the client during the handshake, which the
			// client takes for a failed connection: no answer yet.
			for tries := 1; err != nil && strings.Contains(err.Error(), "got 'PING'") && tries < 5; tries++ {
				nc, err = nats.Connect(d.url, nats.UserCredentials(creds), nats.Timeout(30*time.Second))
			}
			if err == nil {
				nc.Close()
				t.Errorf("a user signed by %s was accepted", what)
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("a user signed by %s: %v, want an authorization violation", what, err)
			}
		})
	}

	// agent_a's JWT with operator's tags and its signature kept.
	data, err := os.ReadFile(d.in.CredsFile("agent_a"))
	if err != nil {
		t.Fatal(err)
	}
	token, _ := jwt.ParseDecoratedJWT(data)
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	claims.Tags = jwt.TagList{messages.ClaimTagOperator}
	forged, err := claims.Encode(rogue) // a fresh payload under rogue's signature...
	if err != nil {
		t.Fatal(err)
	}
	parts, orig := strings.Split(forged, "."), strings.Split(token, ".")
	forged = parts[0] + "." + strings.Split(strings.Replace(forged, parts[0]+".", "", 1), ".")[0] + "." + orig[2] // ...with agent_a's signature
	forgedFile := filepath.Join(t.TempDir(), "forged.creds")
	if err := os.WriteFile(forgedFile, []byte(strings.Replace(string(data), token, forged, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsflags.ReadCreds(forgedFile); err == nil || !strings.Contains(err.Error(), "altered") {
		t.Errorf("a forged JWT read as credentials: %v", err)
	}
	if nc, err := nats.Connect(d.url, nats.UserCredentials(forgedFile)); err == nil {
		nc.Close()
		t.Error("a JWT whose claims were altered was accepted")
	}

	// Truncated, or not credentials at all: named before any connection.
	truncated := filepath.Join(t.TempDir(), "truncated.creds")
	if err := os.WriteFile(truncated, data[:len(data)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	notCreds := filepath.Join(t.TempDir(), "notes.creds")
	if err := os.WriteFile(notCreds, []byte("user: agent_a\npassword: hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{truncated: "truncated", notCreds: "not a credentials file", filepath.Join(t.TempDir(), "missing.creds"): "no such file"} {
		flags := natsflags.Flags{Server: d.url, Creds: file}
		if nc, err := flags.Connect("test"); err == nil {
			nc.Close()
			t.Errorf("%s: connected", file)
		} else if !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming the file and saying %q", file, err, want)
		}
	}
	// Nothing that runs was disturbed.
	if res, err := a.Call(testenv.Context(t), "demo-echo", map[string]string{"text": "still here"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("A after the refusals: %+v %v", res, err)
	}
}

// TestClaimsTheCoordinatorCannotUseAreRefused: a user of AGENTS signed by
// its account's key, but whose claims name agents with subject wildcards
// ('>'), every agent ('*'), a malformed pattern or a Toolbus tag that does
// not exist, or that carries no Toolbus claims at all, is refused every
// request with forbidden naming the claim, and audited; a pattern with a
// prefix acts as the agents it matches only; other users are served as
// before.
func TestClaimsTheCoordinatorCannotUseAreRefused(t *testing.T) {
	t.Parallel()
	d := liveInstallation(t)
	agents := d.in.State().Accounts["AGENTS"]
	a := agentClient(t, d.as(t, "agent_a"), "support-bot")
	ctx := testenv.Context(t)
	audited := countAudited(t, d.as(t, "auditor"), "forbidden", 0)
	refusals := 0
	for tag, want := range map[string]string{
		messages.ClaimTagAgent + ">":              "subject wildcard",
		messages.ClaimTagAgent + "support.>":      "subject wildcard",
		messages.ClaimTagAgent + "*":              "every agent",
		messages.ClaimTagAgent + "support bot":    "agent pattern",
		messages.ClaimTagPrefix + "admin":         "none Toolbus knows",
		"team:billing":                            "no identities file",
		messages.ClaimTagAgent + "[a-z]*":         "agent pattern",
		messages.ClaimTagAgent + "support-bot\\*": "agent pattern",
	} {
		creds := signUser(t, d.in, agents, "wild", func(uc *jwt.UserClaims) {
			uc.Tags = jwt.TagList{tag} // as written
			uc.Sub.Allow.Add("toolbus.results.wildroute000000000001.>")
		})
		nc := testenv.Connect(t, d.url, nats.UserCredentials(creds), nats.CustomInboxPrefix("_INBOX_wild"))
		c, err := client.New(nc, client.Options{Agent: "support-bot", CoordinatorReads: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ListTools(ctx, messages.ListToolsRequest{})
		if !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) || !strings.Contains(err.Error(), want) {
			t.Errorf("tag %q: %v, want forbidden saying %q", tag, err, want)
		}
		_, err = c.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`)})
		if !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) {
			t.Errorf("tag %q submitting: %v, want forbidden", tag, err)
		}
		refusals += 2
	}
	if n := countAudited(t, d.as(t, "auditor"), "forbidden", audited+refusals); n < audited+refusals {
		t.Errorf("%d refusals audited, want %d", n-audited, refusals)
	}
	// A prefix pattern: the agents it matches, and no other.
	creds := signUser(t, d.in, agents, "triage", func(uc *jwt.UserClaims) {
		uc.Tags = jwt.TagList{messages.ClaimTagAgent + "triage-*"}
	})
	nc := testenv.Connect(t, d.url, nats.UserCredentials(creds), nats.CustomInboxPrefix("_INBOX_triage"))
	for agent, allowed := range map[string]bool{"triage-7": true, "triage-": true, "support-bot": false, "xtriage-1": false} {
		c, err := client.New(nc, client.Options{Agent: agent, CoordinatorReads: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ListTools(ctx, messages.ListToolsRequest{})
		if allowed && err != nil || !allowed && !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) {
			t.Errorf("triage-* acting as %s: %v", agent, err)
		}
	}
	if res, err := a.Call(ctx, "demo-echo", map[string]string{"text": "unaffected"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("A after the refusals: %+v %v", res, err)
	}
}
