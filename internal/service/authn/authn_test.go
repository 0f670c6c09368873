package authn_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/oidctest"
	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/authn"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/support/oidc"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

const audience = "toolbus"

// stack is an installation of toolbus setup with an identity provider: a
// server of its configuration, a coordinator without an identities file,
// the demo worker, a test issuer and the callout.
type stack struct {
	in      *setup.Installation
	url     string
	iss     *oidctest.Issuer
	callout *authn.Callout
	log     *logLines
}

func startStack(t *testing.T, mutate ...func(*authn.Config, *oidc.Config)) *stack {
	t.Helper()
	in, err := setup.Setup(setup.Options{Dir: t.TempDir(), Namespaces: []string{demo.Name}})
	if err != nil {
		t.Fatal(err)
	}
	iss := oidctest.Start(t)
	if _, err := in.ConfigureOIDC(setup.OIDCOptions{Issuer: iss.URL, Audience: audience, OperatorsClaim: "groups", OperatorsValue: "toolbus-operators"}); err != nil {
		t.Fatal(err)
	}
	srv := testenv.InstallationServer(t, in)
	s := &stack{in: in, url: srv.ClientURL(), iss: iss, log: &logLines{}}
	as := func(user string) *nats.Conn {
		return testenv.Connect(t, s.url, nats.UserCredentials(in.CredsFile(user)), nats.CustomInboxPrefix("_INBOX_"+user))
	}
	testenv.Coordinator(t, s.url, func(cfg *coordinator.Config) { cfg.Conn = as(setup.UserCoordinator) })
	testenv.Worker(t, "", worker.Config{Conn: as(setup.WorkerUser(demo.Name))}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})

	o := in.OIDC()
	answers, users, err := in.AuthnKeys()
	if err != nil {
		t.Fatal(err)
	}
	vcfg := oidc.Config{Issuer: o.Issuer, Audiences: []string{o.Audience}}
	cfg := authn.Config{
		Conn:          testenv.Connect(t, s.url, nats.UserCredentials(in.AuthnCreds())),
		AgentsAccount: in.State().Accounts[setup.AccountAgents],
		UserKey:       users, AnswerKey: answers,
		AgentsClaim: o.AgentsClaim, OperatorsClaim: o.OperatorsClaim, OperatorsValue: o.OperatorsValue,
		Logger: slog.New(s.log), LogLinesPerSecond: 1000,
	}
	for _, m := range mutate {
		m(&cfg, &vcfg)
	}
	if cfg.Verifier, err = oidc.NewVerifier(vcfg); err != nil {
		t.Fatal(err)
	}
	if s.callout, err = authn.Start(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.callout.Stop)
	return s
}

// connect connects with token alone, as an agent's program of the
// identity provider does: the server's default sentinel takes it to the
// callout, and its inbox is its token's.
func (s *stack) connect(token string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Token(token), nats.MaxReconnects(0), nats.Timeout(10 * time.Second)}
	if inbox, err := messages.TokenInboxOf(token); err == nil {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	return nats.Connect(s.url, opts...)
}

func (s *stack) client(t *testing.T, token, agent string) (*nats.Conn, *client.Client) {
	t.Helper()
	nc, err := s.connect(token)
	if err != nil {
		t.Fatalf("connect with a token: %v (callout: %s)", err, s.log)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.Options{Agent: agent, CoordinatorReads: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return nc, c
}

// TestTokenUsersActAsTheirClaimsSay: a client that connects with a token
// of the issuer is a user of AGENTS that acts as the agents its claim
// names, and as no other; one whose groups hold the operators' group is
// an operator; each receives its replies on its own inbox and may
// subscribe to no other's.
func TestTokenUsersActAsTheirClaimsSay(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	ctx := testenv.Context(t)
	alice := s.iss.Token("alice", audience, map[string]any{"toolbus_agents": []any{"support-bot", "triage-*"}})

	nc, c := s.client(t, alice, "support-bot")
	res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "hello"})
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a call as support-bot: %v %+v", err, res)
	}
	_, triage := s.client(t, alice, "triage-7")
	if res, err := triage.Call(ctx, "demo-echo", map[string]string{"text": "hi"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a call as triage-7: %v %+v", err, res)
	}
	_, billing := s.client(t, alice, "billing-bot")
	if _, err := billing.Call(ctx, "demo-echo", map[string]string{"text": "x"}); !errors.Is(err, messages.ErrForbidden) {
		t.Errorf("a call as billing-bot, which the token does not name: %v", err)
	}
	if _, err := c.Operator().ListAudit(ctx, messages.AuditListRequest{}); !errors.Is(err, messages.ErrForbidden) {
		t.Errorf("the audit log, to a user that is no operator: %v", err)
	}
	// Its inbox is its own: another's is refused by the server.
	bobInbox := messages.TokenInbox(s.iss.URL, "bob")
	errs := make(chan error, 1)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	if _, err := nc.SubscribeSync(bobInbox + ".>"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Errorf("subscribing to another's inbox: %v", err)
		}
	case <-ctx.Done():
		t.Error("subscribing to another user's inbox was not refused")
	}

	ops := s.iss.Token("olga", audience, map[string]any{"groups": []any{"staff", "toolbus-operators"}})
	_, op := s.client(t, ops, "")
	page, err := op.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: "forbidden"})
	if err != nil {
		t.Fatalf("the audit log, to an operator of the issuer: %v", err)
	}
	// The refusals name the user the callout issued, by its subject.
	found := false
	for _, rec := range page.Records {
		if strings.HasSuffix(rec.By, "/oidc:alice") {
			found = true
		}
	}
	if !found {
		t.Errorf("no refusal of oidc:alice in the audit log: %+v", page.Records)
	}
	if st := s.callout.Stats(); st.Issued < 4 || st.Refused != 0 {
		t.Errorf("callout stats %+v", st)
	}
}

// TestCalloutRefusesTokensItCannotTrust: a connection is refused, and the
// callout says why, for a token that is not a JWT or is truncated, of
// another audience or issuer, an expired one, one whose signature is not
// the issuer's (forged with another key, or its claims altered after
// signing), one whose claims name agents with subject wildcards or
// nothing at all, and no token.
func TestCalloutRefusesTokensItCannotTrust(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	other := oidctest.Start(t)
	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	agents := map[string]any{"toolbus_agents": "support-bot"}
	now := time.Now()
	good := s.iss.Token("alice", audience, agents)
	parts := strings.Split(good, ".")
	// The issuer's token with its claims changed after it was signed.
	altered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(
		`{"iss":%q,"sub":"alice","aud":%q,"exp":%d,"toolbus_agents":"billing-bot"}`, s.iss.URL, audience, now.Add(time.Minute).Unix()))) + "." + parts[2]
	for _, tc := range []struct{ name, token, reason string }{
		{"not a JWT", "not-a-token", "not a signed JWT"},
		{"cut before its signature", parts[0] + "." + parts[1], "not a signed JWT"},
		{"a truncated signature", good[:len(good)-4], "signature"},
		{"claims altered after signing", altered, "signature"},
		{"another audience", s.iss.Token("alice", "another-api", agents), "audience"},
		{"another issuer", other.Token("alice", audience, agents), "issuer"},
		{"expired", s.iss.Token("alice", audience, map[string]any{"toolbus_agents": "support-bot", "exp": now.Add(-time.Minute).Unix()}), "expired"},
		{"just expired", s.iss.Token("alice", audience, map[string]any{"toolbus_agents": "support-bot", "exp": now.Add(-time.Second).Unix()}), "expired"},
		{"forged", oidctest.SignWith(forger, s.iss.KeyID(), map[string]any{"iss": s.iss.URL, "sub": "alice", "aud": audience, "exp": now.Add(time.Minute).Unix(), "toolbus_agents": "support-bot"}), "signature"},
		{"'>'", s.iss.Token("alice", audience, map[string]any{"toolbus_agents": []any{"support-bot", ">"}}), "subject wildcard"},
		{"a '>' pattern", s.iss.Token("alice", audience, map[string]any{"toolbus_agents": "support.>"}), "subject wildcard"},
		{"'*' alone", s.iss.Token("alice", audience, map[string]any{"toolbus_agents": "*"}), "every agent"},
		{"a number", s.iss.Token("alice", audience, map[string]any{"toolbus_agents": []any{"support-bot", 7}}), "not a string"},
		{"no agents", s.iss.Token("alice", audience, nil), "grants nothing"},
		{"operators claim not a group", s.iss.Token("alice", audience, map[string]any{"groups": true}), "groups"},
		{"no token", "", "no token"},
	} {
		nc, err := s.connect(tc.token)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", tc.name)
			continue
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", tc.name, err)
		}
		if !s.log.has(tc.reason) {
			t.Errorf("%s: the callout did not say %q: %s", tc.name, tc.reason, s.log)
		}
		s.log.reset()
	}
	if st := s.callout.Stats(); st.Issued != 0 || st.Refused != 16 {
		t.Errorf("callout stats %+v", st)
	}
}

// TestCalloutWithTheIssuerDown: while the issuer hangs, or refuses
// connections, every connection with a token is refused by the callout
// (an answer, not the server's timeout) after at most one fetch of the
// issuer's keys bounded by its timeout; the connections that follow within
// the retry interval are refused without one. Tokens of keys fetched
// before the issuer went down are still accepted.
func TestCalloutWithTheIssuerDown(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(_ *authn.Config, v *oidc.Config) {
		v.FailureRetry = time.Hour
		v.FetchTimeout = 500 * time.Millisecond
	})
	token := s.iss.Token("alice", audience, map[string]any{"toolbus_agents": "support-bot"})
	release := s.iss.Hang()
	defer release()
	var took []time.Duration
	for range 10 {
		start := time.Now()
		nc, err := s.connect(token)
		took = append(took, time.Since(start).Round(time.Millisecond))
		if err == nil {
			nc.Close()
			t.Fatal("connected while the issuer hangs")
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("%v, want the callout's refusal", err)
		}
	}
	if st := s.callout.Stats(); st.Refused != 10 {
		t.Errorf("the callout refused %d of 10 connections; the others waited for the server's timeout", st.Refused)
	}
	if n := s.iss.Requests("/.well-known/openid-configuration") + s.iss.Requests("/jwks"); n != 1 {
		t.Errorf("%d requests to the hanging issuer for 10 connections; want 1", n)
	}
	if !s.log.has("not available") {
		t.Errorf("the callout's reason: %s", s.log)
	}
	t.Logf("connections refused while the issuer hangs (fetch timeout 500ms): %v", took)
	release()

	// Keys fetched, the issuer stops: tokens of its keys are still taken.
	up := startStack(t)
	good := up.iss.Token("alice", audience, map[string]any{"toolbus_agents": "support-bot"})
	nc, err := up.connect(good)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	up.iss.Close()
	if nc, err = up.connect(good); err != nil {
		t.Errorf("a token of a key fetched before the issuer stopped: %v", err)
	} else {
		nc.Close()
	}
}

// TestCalloutFloodIsBounded: with one worker and room for one request, a
// burst of connections while a check waits for the issuer is refused at
// once as busy, beyond what the callout holds; the issuer is asked for its
// keys once (the others wait for that fetch); once the issuer answers, a
// token is taken.
func TestCalloutFloodIsBounded(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(c *authn.Config, v *oidc.Config) {
		c.Workers, c.Queue = 1, 1
		v.FetchTimeout, v.FailureRetry = 3*time.Second, time.Millisecond
	})
	release := s.iss.Hang()
	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var wg sync.WaitGroup
	var refused sync.Map
	for i := range 40 {
		wg.Go(func() {
			claims := map[string]any{"iss": s.iss.URL, "sub": fmt.Sprint("m", i), "aud": audience, "exp": time.Now().Add(time.Minute).Unix(), "toolbus_agents": "x"}
			nc, err := s.connect(oidctest.SignWith(forger, fmt.Sprint("k", i), claims))
			if err == nil {
				nc.Close()
			}
			refused.Store(i, err)
		})
	}
	wg.Wait()
	release()
	refused.Range(func(k, v any) bool {
		if v == nil {
			t.Errorf("connection %v was accepted", k)
		}
		return true
	})
	st := s.callout.Stats()
	if st.Busy == 0 || st.Busy+st.Refused+st.Late > 40 {
		t.Errorf("callout stats %+v: want busy refusals for what one worker and one place cannot hold", st)
	}
	if n := s.iss.Requests("/.well-known/openid-configuration"); n > 1 {
		t.Errorf("the flood had the issuer asked %d times", n)
	}
	t.Logf("40 connections at once with one worker and one place: %+v", st)
	nc, err := s.connect(s.iss.Token("alice", audience, map[string]any{"toolbus_agents": "support-bot"}))
	if err != nil {
		t.Fatalf("after the flood, with the issuer answering: %v", err)
	}
	nc.Close()
}

// TestCalloutTroubleLeavesRunningClientsAlone: while the issuer hangs and
// connections with tokens the callout cannot check flood it beyond its one
// worker and one place, a client of a token connected before keeps its
// connection and its calls complete, and a signed agent's user, whose
// credentials the server checks without the callout, connects and calls;
// once the issuer answers again a new token's connection is taken.
func TestCalloutTroubleLeavesRunningClientsAlone(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(c *authn.Config, v *oidc.Config) {
		c.Workers, c.Queue = 1, 1
		v.FetchTimeout, v.FailureRetry = 3*time.Second, time.Millisecond
	})
	ctx := testenv.Context(t)
	if _, err := s.in.AddAgent("agent_a", setup.AgentOptions{ActsAs: []string{"billing-bot"}}); err != nil {
		t.Fatal(err)
	}
	var disconnects atomic.Int32
	alice := s.iss.Token("alice", audience, map[string]any{"toolbus_agents": "support-bot"})
	inbox, err := messages.TokenInboxOf(alice)
	if err != nil {
		t.Fatal(err)
	}
	running := testenv.Connect(t, s.url, nats.Token(alice), nats.CustomInboxPrefix(inbox),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnects.Add(1) }))
	runningClient, err := client.New(running, client.Options{Agent: "support-bot", CoordinatorReads: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runningClient.Close)
	if res, err := runningClient.Call(ctx, "demo-echo", map[string]string{"text": "before"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a call before the flood: %v %+v", err, res)
	}

	release := s.iss.Hang()
	defer release()
	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	stop := make(chan struct{})
	var flood sync.WaitGroup
	var stopOnce sync.Once
	stopFlood := func() { stopOnce.Do(func() { close(stop) }); flood.Wait() }
	defer stopFlood()
	var attempts, accepted atomic.Int64
	for i := range 8 {
		flood.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				claims := map[string]any{"iss": s.iss.URL, "sub": fmt.Sprint("m", i), "aud": audience, "exp": time.Now().Add(time.Minute).Unix(), "toolbus_agents": "x"}
				nc, err := s.connect(oidctest.SignWith(forger, fmt.Sprint("k", i, "-", n), claims))
				attempts.Add(1)
				if err == nil {
					accepted.Add(1)
					nc.Close()
				}
			}
		})
	}
	// The flood is under way once the callout turns connections away.
	for s.callout.Stats().Busy == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the flood never filled the callout: %+v", s.callout.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}

	for i := range 5 {
		if res, err := runningClient.Call(ctx, "demo-echo", map[string]string{"text": fmt.Sprint("during ", i)}); err != nil || res.Status != messages.StateCompleted {
			t.Fatalf("a call of the token's client during the flood: %v %+v", err, res)
		}
	}
	signed := testenv.Connect(t, s.url, nats.UserCredentials(s.in.CredsFile("agent_a")), nats.CustomInboxPrefix("_INBOX_agent_a"))
	signedClient, err := client.New(signed, client.Options{Agent: "billing-bot", CoordinatorReads: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(signedClient.Close)
	if res, err := signedClient.Call(ctx, "demo-echo", map[string]string{"text": "during"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a signed agent's call during the flood: %v %+v", err, res)
	}
	if n := disconnects.Load(); n != 0 || !running.IsConnected() {
		t.Errorf("the token's client connected before the flood was disconnected %d times", n)
	}
	stopFlood()
	release()
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d of %d forged tokens were taken", n, attempts.Load())
	}
	t.Logf("flood: %d connections, callout %+v", attempts.Load(), s.callout.Stats())

	nc, err := s.connect(s.iss.Token("bob", audience, map[string]any{"toolbus_agents": "support-bot"}))
	if err != nil {
		t.Fatalf("a new token once the issuer answers: %v (callout: %s)", err, s.log)
	}
	nc.Close()
}

// TestUserExpiresWithItsToken: the server disconnects a token's user when
// its token expires.
func TestUserExpiresWithItsToken(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	token := s.iss.Token("alice", audience, map[string]any{"toolbus_agents": "support-bot", "exp": time.Now().Add(2 * time.Second).Unix()})
	errs := make(chan error, 4)
	nc, err := nats.Connect(s.url, nats.Token(token), nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrAuthExpired) {
			t.Errorf("the server said %v, want the expiry", err)
		}
	case <-testenv.Context(t).Done():
		t.Fatal("the user outlived its token")
	}
}

// logLines keeps the callout's log for the test to read.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }
func (l *logLines) has(s string) bool                  { return strings.Contains(l.String(), s) }
func (l *logLines) reset()                             { l.mu.Lock(); l.lines = nil; l.mu.Unlock() }
func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
