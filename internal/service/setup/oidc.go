package setup

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Agents from the organisation's identity provider: with OIDC options,
// setup makes what the auth callout (toolbus authn) needs to issue users
// of AGENTS for the issuer's tokens:
//
//   - the account AUTH, whose external authorization sends every
//     connection of its users but the callout's own to the callout, and
//     lets the callout place users in AGENTS only;
//   - the callout's user of AUTH (creds/authn.creds), which may receive the
//     server's authorization requests and answer them, nothing else;
//   - a bearer user of AUTH that may publish and subscribe to nothing, the
//     servers' default sentinel (in nats/accounts.conf): a connection that
//     presents no credentials of its own, only a token, is this user until
//     the callout says who it is;
//   - a scoped signing key of AGENTS, the key the callout signs its users
//     with: the scope, in AGENTS's JWT, fixes their permissions to those of
//     an agent (publish the API; subscribe to their own inbox, named by
//     their inbox tag), whatever the callout writes.
//
// The callout signs its answers with AUTH's key and its users with the
// scoped key: those two seeds are all it holds of the installation.

// AccountAuth is the callout's account.
const AccountAuth = "AUTH"

// UserAuthn is the callout's user of AUTH.
const UserAuthn = "authn"

// DefaultAgentsClaim is the claim a token names its agents in by default.
const DefaultAgentsClaim = "toolbus_agents"

// InboxTag prefixes the tag that names a callout user's inbox (its
// scope's subscribe permission is _INBOX_{{tag(inbox)}}.>).
const InboxTag = "inbox:"

// scopeRole names the scoped signing key in AGENTS's JWT.
const scopeRole = "toolbus-authn"

// OIDCOptions configure the identity provider whose tokens the callout
// accepts.
type OIDCOptions struct {
	// Issuer is the issuer's identifier (its URL). Required.
	Issuer string `json:"issuer"`
	// Audience is what a token's aud must hold. Required.
	Audience string `json:"audience"`
	// AgentsClaim names the claim listing the agents a token's user may
	// act as (a string of names separated by spaces, or a list). Default
	// DefaultAgentsClaim.
	AgentsClaim string `json:"agents_claim"`
	// OperatorsClaim, when set, names the claim that makes a token's user
	// an operator: the boolean true, or, with OperatorsValue, a value or a
	// list holding it (a group). Without it the issuer makes no operators.
	OperatorsClaim string `json:"operators_claim,omitempty"`
	OperatorsValue string `json:"operators_value,omitempty"`
	// ConsoleClientID is the console's client at the issuer, for the
	// operators' login (toolbus up passes it to the console); empty, the
	// console logs in with tokens only.
	ConsoleClientID string `json:"console_client_id,omitempty"`
}

// OIDC is the installation's identity provider and the keys of its callout.
type OIDC struct {
	OIDCOptions
	// SigningKey is AGENTS's scoped signing key, the callout's users' signer.
	SigningKey string `json:"agents_signing_key"`
	// Sentinel is the default sentinel's JWT (a bearer user of AUTH).
	Sentinel string `json:"sentinel"`
}

func (o *OIDCOptions) check() error {
	u, err := url.Parse(o.Issuer)
	if o.Issuer == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("setup: --oidc-issuer %q: want the issuer's URL, such as https://login.example.com/realms/main", o.Issuer)
	}
	if o.Audience == "" {
		return errors.New("setup: --oidc-audience is required with --oidc-issuer: the audience a token must hold to be an agent's")
	}
	if o.AgentsClaim == "" {
		o.AgentsClaim = DefaultAgentsClaim
	}
	if o.OperatorsValue != "" && o.OperatorsClaim == "" {
		return errors.New("setup: --oidc-operators-value needs --oidc-operators-claim, the claim it is looked for in")
	}
	for _, c := range []string{o.AgentsClaim, o.OperatorsClaim} {
		if strings.ContainsAny(c, " \t\r\n") {
			return fmt.Errorf("setup: claim name %q holds a space", c)
		}
	}
	return nil
}

// OIDC is the installation's identity provider, nil when it has none.
func (in *Installation) OIDC() *OIDC {
	if in.state.OIDC == nil {
		return nil
	}
	o := *in.state.OIDC
	return &o
}

// AuthnKeys are the callout's keys: AUTH's, which signs its answers, and
// AGENTS's scoped signing key, which signs the users it issues.
func (in *Installation) AuthnKeys() (answers, users nkeys.KeyPair, err error) {
	if in.state.OIDC == nil {
		return nil, nil, errors.New("the installation has no identity provider: configure one with toolbus setup --oidc-issuer URL --oidc-audience A")
	}
	if answers, err = in.files.readKey("account "+AccountAuth, in.state.Accounts[AccountAuth]); err != nil {
		return nil, nil, err
	}
	if users, err = in.files.readKey("the callout's signing key of "+AccountAgents, in.state.OIDC.SigningKey); err != nil {
		return nil, nil, err
	}
	return answers, users, nil
}

// ConfigureOIDC makes the installation accept the tokens of an identity
// provider through the auth callout (toolbus authn), or changes which
// (the callout reads the options when it starts). The change holds the
// account JWTs to push to running servers: AUTH's and AGENTS's, the first
// time. The default sentinel, in nats/accounts.conf, takes effect when a
// server starts or reloads its configuration.
func (in *Installation) ConfigureOIDC(opts OIDCOptions) (Change, error) {
	unlock, err := in.lockCurrent()
	if err != nil {
		return Change{}, err
	}
	defer unlock()
	before := in.state.OIDC
	tokens, err := in.ids.configureOIDC(opts)
	if err != nil {
		in.state.OIDC = before
		return Change{}, err
	}
	if err := in.servers.writePreload(); err != nil {
		return Change{}, err
	}
	if err := in.files.save(&in.state); err != nil {
		return Change{}, err
	}
	return Change{AccountJWTs: tokens}, nil
}

// configureOIDC makes or updates what the callout needs (see above). It
// returns the account JWTs it signed anew, to push to running servers.
func (ids *identities) configureOIDC(opts OIDCOptions) ([]string, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	st := ids.state
	if st.OIDC != nil && st.OIDC.OIDCOptions == opts {
		return nil, nil
	}
	fresh := st.OIDC == nil
	if fresh {
		st.OIDC = &OIDC{OIDCOptions: opts}
	}
	if !fresh {
		st.OIDC.OIDCOptions = opts
		return nil, nil // the keys and accounts stay; toolbus authn reads the options when it starts
	}
	akp, err := ids.files.key("account "+AccountAuth, st.Accounts[AccountAuth], nkeys.PrefixByteAccount)
	if err != nil {
		return nil, err
	}
	st.Accounts[AccountAuth] = mustPublic(akp)
	skp, err := ids.files.key("the callout's signing key of "+AccountAgents, "", nkeys.PrefixByteAccount)
	if err != nil {
		return nil, err
	}
	st.OIDC.SigningKey = mustPublic(skp)

	// The callout's user, listed in AUTH's auth_users: it needs AUTH's key
	// to be issued, and its key to be listed before AUTH is signed.
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	st.Users[UserAuthn] = mustPublic(ukp)
	var tokens []string
	for _, name := range []string{AccountAuth, AccountAgents} {
		token, err := ids.signAccount(name)
		if err != nil {
			return nil, err
		}
		if err := replaceFile(ids.files.accountJWTPath(st.Accounts[name]), []byte(token), 0o644); err != nil {
			return nil, err
		}
		tokens = append(tokens, token)
	}
	uc := jwt.NewUserClaims(st.Users[UserAuthn])
	uc.Name = UserAuthn
	uc.Sub.Allow.Add("$SYS.REQ.USER.AUTH")
	uc.Pub.Deny.Add(">")
	uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1}
	if err := ids.writeCreds(UserAuthn, uc, akp, ukp); err != nil {
		return nil, err
	}
	sentinel := jwt.NewUserClaims(mustPublic(mustUser()))
	sentinel.Name = "sentinel"
	sentinel.BearerToken = true
	sentinel.Pub.Deny.Add(">")
	sentinel.Sub.Deny.Add(">")
	if st.OIDC.Sentinel, err = sentinel.Encode(akp); err != nil {
		return nil, err
	}
	return tokens, nil
}

func mustUser() nkeys.KeyPair {
	kp, err := nkeys.CreateUser()
	if err != nil {
		panic(err)
	}
	return kp
}

// signAuth fills AUTH's claims: the callout's user is its one auth user,
// and the users it issues are AGENTS's.
func (ids *identities) signAuth(ac *jwt.AccountClaims) {
	ac.Authorization.AuthUsers.Add(ids.state.Users[UserAuthn])
	ac.Authorization.AllowedAccounts.Add(ids.state.Accounts[AccountAgents])
}

// agentsScope is the scope of the callout's signing key in AGENTS: an
// agent's publish permissions, and its inbox alone to subscribe to.
func (ids *identities) agentsScope() *jwt.UserScope {
	g := newGrants(ids.state.Prefix)
	scope := jwt.NewUserScope()
	scope.Key = ids.state.OIDC.SigningKey
	scope.Role = scopeRole
	scope.Description = "the users toolbus authn issues for the identity provider's tokens"
	scope.Template.Pub.Allow.Add(g.subjects(permissions("agent publish"), "")...)
	scope.Template.Sub.Allow.Add("_INBOX_{{tag(" + strings.TrimSuffix(InboxTag, ":") + ")}}.>")
	return scope
}

// writeCreds signs a user of an account and writes its credentials.
func (ids *identities) writeCreds(user string, uc *jwt.UserClaims, akp, ukp nkeys.KeyPair) error {
	token, err := uc.Encode(akp)
	if err != nil {
		return err
	}
	seed, err := ukp.Seed()
	if err != nil {
		return err
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return err
	}
	path := ids.files.credsFile(user)
	_ = os.Remove(path)
	if err := ids.files.createFile(path, creds, 0o600); err != nil {
		return fmt.Errorf("setup: credentials of %s: %w", user, err)
	}
	return nil
}

// AuthnCreds is the callout's credentials file.
func (in *Installation) AuthnCreds() string {
	return filepath.Join(in.dir, "creds", UserAuthn+".creds")
}
