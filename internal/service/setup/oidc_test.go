package setup_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
)

// TestConfigureOIDC: an identity provider adds the callout's account AUTH
// (whose one auth user is the callout's, placing users in AGENTS only),
// the callout's credentials (0600: it may receive authorization requests
// and answer them, nothing else), a scoped signing key of AGENTS whose
// scope holds its users to an agent's permissions, and the servers'
// default sentinel; configuring it again, or running setup again, changes
// nothing, and what cannot configure it is refused naming the option.
func TestConfigureOIDC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, err := setup.Setup(setup.Options{Dir: dir, Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts setup.OIDCOptions
		want string
	}{
		{setup.OIDCOptions{Audience: "toolbus"}, "--oidc-issuer"},
		{setup.OIDCOptions{Issuer: "login.example.com", Audience: "toolbus"}, "--oidc-issuer"},
		{setup.OIDCOptions{Issuer: "https://login.example.com"}, "--oidc-audience"},
		{setup.OIDCOptions{Issuer: "https://login.example.com", Audience: "toolbus", OperatorsValue: "ops"}, "--oidc-operators-claim"},
		{setup.OIDCOptions{Issuer: "https://login.example.com", Audience: "toolbus", AgentsClaim: "toolbus agents"}, "space"},
	} {
		if _, err := in.ConfigureOIDC(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.opts, err, c.want)
		}
	}
	if in.OIDC() != nil {
		t.Fatal("a refused configuration was kept")
	}
	opts := setup.OIDCOptions{Issuer: "https://login.example.com/realms/main", Audience: "toolbus", OperatorsClaim: "groups", OperatorsValue: "toolbus-operators"}
	change, err := in.ConfigureOIDC(opts)
	if err != nil {
		t.Fatal(err)
	}
	st := in.State()
	if len(change.AccountJWTs) != 2 {
		t.Fatalf("%d account JWTs to push, want AUTH's and AGENTS's", len(change.AccountJWTs))
	}
	o := in.OIDC()
	if o.AgentsClaim != setup.DefaultAgentsClaim || o.Issuer != opts.Issuer {
		t.Errorf("options %+v", o.OIDCOptions)
	}
	var auth, agents *jwt.AccountClaims
	for _, token := range change.AccountJWTs {
		ac, err := jwt.DecodeAccountClaims(token)
		if err != nil {
			t.Fatal(err)
		}
		switch ac.Subject {
		case st.Accounts[setup.AccountAuth]:
			auth = ac
		case st.Accounts[setup.AccountAgents]:
			agents = ac
		}
	}
	if auth == nil || agents == nil {
		t.Fatal("the change holds neither AUTH nor AGENTS")
	}
	if !slices.Equal(auth.Authorization.AuthUsers, jwt.StringList{st.Users[setup.UserAuthn]}) || !slices.Equal(auth.Authorization.AllowedAccounts, jwt.StringList{st.Accounts[setup.AccountAgents]}) {
		t.Errorf("AUTH's authorization %+v", auth.Authorization)
	}
	if auth.Limits.JetStreamLimits.DiskStorage != 0 || len(auth.Imports) != 0 || len(auth.Exports) != 0 {
		t.Errorf("AUTH has JetStream, imports or exports: %+v", auth)
	}
	scope, ok := agents.SigningKeys.GetScope(o.SigningKey)
	us, isUser := scope.(*jwt.UserScope)
	if !ok || !isUser {
		t.Fatalf("AGENTS's signing key %s has no user scope: %+v", o.SigningKey, agents.SigningKeys)
	}
	if !slices.Equal(us.Template.Pub.Allow, jwt.StringList{"toolbus.api.>", "$JS.API.INFO", "$JS.API.CONSUMER.CREATE.>"}) ||
		!slices.Equal(us.Template.Sub.Allow, jwt.StringList{"_INBOX_{{tag(inbox)}}.>"}) {
		t.Errorf("the scope's permissions: %+v", us.Template.Permissions)
	}
	claims, err := natsflags.ReadCreds(in.AuthnCreds())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(claims.Sub.Allow, jwt.StringList{"$SYS.REQ.USER.AUTH"}) || !slices.Equal(claims.Pub.Deny, jwt.StringList{">"}) || claims.Resp == nil || claims.Issuer != st.Accounts[setup.AccountAuth] {
		t.Errorf("the callout's user: %+v", claims)
	}
	info, err := os.Stat(in.AuthnCreds())
	if err != nil || info.Mode().Perm()&0o077 != 0 {
		t.Errorf("the callout's credentials: %v %v", info.Mode(), err)
	}
	preload, _ := os.ReadFile(filepath.Join(dir, "nats", "accounts.conf"))
	if !strings.Contains(string(preload), "default_sentinel: \""+o.Sentinel+"\"") || !strings.Contains(string(preload), st.Accounts[setup.AccountAuth]) {
		t.Error("accounts.conf holds neither the sentinel nor AUTH")
	}
	sentinel, err := jwt.DecodeUserClaims(o.Sentinel)
	if err != nil || !sentinel.BearerToken || sentinel.Issuer != st.Accounts[setup.AccountAuth] || !slices.Equal(sentinel.Pub.Deny, jwt.StringList{">"}) || !slices.Equal(sentinel.Sub.Deny, jwt.StringList{">"}) {
		t.Errorf("the sentinel: %+v %v", sentinel, err)
	}
	answers, users, err := in.AuthnKeys()
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := answers.PublicKey(); pub != st.Accounts[setup.AccountAuth] {
		t.Error("the answers' key is not AUTH's")
	}
	if pub, _ := users.PublicKey(); pub != o.SigningKey {
		t.Error("the users' key is not the scoped one")
	}

	before := tree(t, dir)
	time.Sleep(10 * time.Millisecond) // a rewritten file would show a later modification time
	if change, err := in.ConfigureOIDC(opts); err != nil || len(change.AccountJWTs) != 0 {
		t.Fatalf("configured again: %+v %v", change, err)
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
	// Another audience changes the options, not the keys.
	opts.Audience = "toolbus-prod"
	if change, err := in.ConfigureOIDC(opts); err != nil || len(change.AccountJWTs) != 0 {
		t.Fatalf("another audience: %+v %v", change, err)
	}
	if in.OIDC().Audience != "toolbus-prod" || in.OIDC().SigningKey != o.SigningKey {
		t.Errorf("after another audience: %+v", in.OIDC())
	}
	// A revoked agent keeps the scoped key in AGENTS's JWT.
	if _, err := in.AddAgent("bot", setup.AgentOptions{}); err != nil {
		t.Fatal(err)
	}
	revoke, err := in.RevokeAgent("bot")
	if err != nil {
		t.Fatal(err)
	}
	ac, _ := jwt.DecodeAccountClaims(revoke.AccountJWTs[0])
	if _, ok := ac.SigningKeys.GetScope(o.SigningKey); !ok {
		t.Error("AGENTS signed again without the callout's key")
	}
}
