package coordinator

import (
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Signed identities: in an installation whose NATS users are JWTs (made by
// toolbus setup and toolbus agent add), an agent's user carries in its
// JWT what it may do, signed by its account's key:
//
//   - a tag messages.ClaimTagAgent+pattern for each agent pattern it may
//     act as, and messages.ClaimTagOperator for an operator;
//   - its routes in its subscribe permissions, <prefix>.results.<route>.>:
//     exactly the routes the server lets it receive.
//
// The server writes the JWT it authenticated the connection with in the
// Nats-Request-Info of every request that crosses the API's import (and
// replaces any the client wrote), so the coordinator reads the user's
// claims from there, with no file to keep and nothing to reload: a user
// issued after the coordinator started is known at its first request, and
// a revoked or expired one is disconnected and refused by the server.

// Users of the auth callout (toolbus authn): a user the callout issues
// for an OpenID Connect token is signed by a signing key of the agents'
// account that only the callout holds. The server keeps no JWT of such a
// user to write in Nats-Request-Info, but it writes the user's name, which
// the callout chose, and the key that signed the user (issuer_key). The
// callout names the user by a JWT of its claims (its Toolbus tags, its
// name, its expiry) signed with that same key: the coordinator reads the
// claims from the name, once it has checked that the key that signed them
// is the one the server says signed the user, for the caller's account.

// claimsCacheSize bounds the decoded claims kept, one per user JWT seen:
// decoding checks the JWT's signature, which the cache spares on every
// request but a user's first.
const claimsCacheSize = 4096

type claimsCache struct {
	mu   sync.Mutex
	byJW map[string]*signedIdentity
}

// signedIdentity is what a user JWT's claims say.
type signedIdentity struct {
	user    *UserIdentity // nil when the JWT carries no Toolbus claims
	name    string
	subject string
	account string
	// issuer is the key that signed the JWT: the account's, or one of its
	// signing keys.
	issuer  string
	expires int64
	err     error
}

// identity reads the caller's claims from its JWT. It returns a nil
// UserIdentity, and no error, for a JWT that carries no Toolbus claims
// (the identities file may name the user by its public key).
func (cc *claimsCache) identity(c *caller, prefix string) (*UserIdentity, string, error) {
	token, issued := c.JWT, c.issuedByCallout()
	if issued {
		token = c.User
	}
	cc.mu.Lock()
	si := cc.byJW[token]
	cc.mu.Unlock()
	if si == nil {
		si = readClaims(token, prefix)
		cc.mu.Lock()
		if cc.byJW == nil || len(cc.byJW) >= claimsCacheSize {
			cc.byJW = map[string]*signedIdentity{}
		}
		cc.byJW[token] = si
		cc.mu.Unlock()
	}
	if si.err != nil {
		return nil, "", si.err
	}
	switch {
	case issued:
		// The server wrote the account and the key that signed the user;
		// claims another key signed, or of another account, are not the
		// ones the user was issued with.
		if si.issuer != c.IssuerKey || si.account != c.Account {
			return nil, "", forbidden("the claims in the name of the caller %s are signed by %s for account %s, not by the key %s that issued the user", c.Account, si.issuer, si.account, c.IssuerKey)
		}
		if si.user == nil {
			return nil, "", forbidden("user %s, issued by the signing key %s, carries no Toolbus claims", si.name, c.IssuerKey)
		}
	case si.subject != c.User || si.account != c.Account:
		// The server wrote both; a JWT that is not the connection's user's
		// is not the caller's.
		return nil, "", forbidden("the request's JWT is of user %s of account %s, not of its caller %s", si.subject, si.account, c)
	}
	if si.expires != 0 && time.Now().Unix() >= si.expires {
		return nil, "", forbidden("user %s's credentials expired at %s", si.name, time.Unix(si.expires, 0).UTC().Format(time.RFC3339))
	}
	return si.user, si.name, nil
}

// issuedByCallout reports whether the caller is a user the server
// registered from an auth callout's answer: it keeps no JWT of it, a
// signing key of the account (not the account's own key) signed it, and
// its name is a JWT, which the callout wrote (see above).
func (c *caller) issuedByCallout() bool {
	return c.JWT == "" && c.IssuerKey != "" && c.IssuerKey != c.Account && strings.HasPrefix(c.User, "eyJ")
}

// readClaims decodes a user JWT and reads its Toolbus claims. A claim
// that cannot be read refuses the user altogether: reading a part of its
// claims could grant what its issuer did not mean to.
func readClaims(token, prefix string) *signedIdentity {
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return &signedIdentity{err: forbidden("the caller's JWT cannot be read: %v", err)}
	}
	si := &signedIdentity{name: uc.Name, subject: uc.Subject, account: uc.Issuer, issuer: uc.Issuer, expires: uc.Expires}
	if uc.IssuerAccount != "" {
		si.account = uc.IssuerAccount
	}
	if si.name == "" {
		si.name = uc.Subject
	}
	var u UserIdentity
	toolbus := false
	for _, tag := range uc.Tags {
		switch {
		case tag == messages.ClaimTagOperator:
			u.Operator, toolbus = true, true
		case strings.HasPrefix(tag, messages.ClaimTagAgent):
			pattern := tag[len(messages.ClaimTagAgent):]
			if err := messages.ValidateAgentPattern(pattern); err != nil {
				si.err = forbidden("user %s's claims cannot be used: tag %q: %v", si.name, tag, err)
				return si
			}
			u.Agents, toolbus = append(u.Agents, pattern), true
		case strings.HasPrefix(tag, messages.ClaimTagPrefix):
			si.err = forbidden("user %s's claims cannot be used: tag %q is none Toolbus knows (%s<pattern>, %s)", si.name, tag, messages.ClaimTagAgent, messages.ClaimTagOperator)
			return si
		}
	}
	if !toolbus {
		return si
	}
	results := prefix + ".results."
	for _, s := range uc.Sub.Allow {
		route, prefixed := strings.CutPrefix(s, results)
		route, suffixed := strings.CutSuffix(route, ".>")
		if prefixed && suffixed && messages.ValidateRoute(route) == nil {
			u.Routes = append(u.Routes, route)
		}
	}
	si.user = &u
	return si
}
