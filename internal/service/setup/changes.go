package setup

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/pkg/messages"
)

// NamespaceAccount is the name of namespace ns's account.
func NamespaceAccount(ns string) string { return "WORKER_" + strings.ToUpper(ns) }

// WorkerUser is the name of namespace ns's workers' user.
func WorkerUser(ns string) string { return "worker_" + ns }

// Change is what a change to an installation signed: the account JWTs to
// push to the running servers (none for a new agent's user, which the
// servers check by its signature alone).
type Change struct {
	AccountJWTs []string
}

// lockCurrent takes the installation's lock and reads its state as
// stored, which another command may have changed; it returns the unlock.
func (in *Installation) lockCurrent() (func(), error) {
	unlock, err := lockDir(in.dir)
	if err != nil {
		return nil, err
	}
	// Another command may have changed the state since Open.
	fresh, err := Open(in.dir)
	if err != nil {
		unlock()
		return nil, err
	}
	in.state = fresh.state
	return unlock, nil
}

// AddNamespace makes namespace ns's account, which imports of TOOLBUS its
// namespace's subjects only, and its workers' user with its credentials
// (CredsFile(WorkerUser(ns))).
func (in *Installation) AddNamespace(ns string) (Change, error) {
	unlock, err := in.lockCurrent()
	if err != nil {
		return Change{}, err
	}
	defer unlock()
	if err := messages.ValidateNamespace(ns); err != nil {
		return Change{}, err
	}
	if cur := in.state.Namespaces[ns]; cur != nil && cur.Removed == nil {
		return Change{}, fmt.Errorf("namespace %s exists (account %s)", ns, NamespaceAccount(ns))
	}
	token, err := in.ids.addNamespace(ns)
	if err != nil {
		return Change{}, err
	}
	if err := in.servers.writePreload(); err != nil {
		return Change{}, err
	}
	if err := in.files.save(&in.state); err != nil {
		return Change{}, err
	}
	return Change{AccountJWTs: []string{token}}, nil
}

func (ids *identities) addNamespace(ns string) (string, error) {
	if err := messages.ValidateNamespace(ns); err != nil {
		return "", err
	}
	for other, cur := range ids.state.Namespaces {
		if other != ns && cur.Removed == nil && strings.EqualFold(other, ns) {
			return "", fmt.Errorf("namespace %s would have the account %s of namespace %s", ns, NamespaceAccount(ns), other)
		}
	}
	if err := validUserName("namespace", ns); err != nil {
		return "", err
	}
	// A namespace added again after its removal is a new account: the
	// removed one stays revoked.
	kp, err := ids.files.key("account "+NamespaceAccount(ns), "", nkeys.PrefixByteAccount)
	if err != nil {
		return "", err
	}
	pub := mustPublic(kp)
	token, err := ids.signNamespace(ns, pub, nil)
	if err != nil {
		return "", err
	}
	if err := ids.files.createFile(ids.files.accountJWTPath(pub), []byte(token), 0o644); err != nil {
		return "", err
	}
	_ = os.Remove(ids.files.credsFile(WorkerUser(ns))) // a removed namespace's, revoked
	user, err := ids.issueUser(WorkerUser(ns), pub, ids.workerPermissions(ns), nil, nil)
	if err != nil {
		return "", err
	}
	ids.state.Namespaces[ns] = &Namespace{Account: pub, User: user, Added: time.Now().UTC()}
	return token, nil
}

func (ids *identities) workerPermissions(ns string) jwt.Permissions {
	g := newGrants(ids.state.Prefix)
	var p jwt.Permissions
	p.Pub.Allow = g.subjects(permissions("worker publish"), ns)
	p.Sub.Allow = g.subjects(permissions("worker subscribe"), ns)
	return p
}

// signNamespace signs namespace ns's account (public key pub); removed,
// it has no imports, no connections, and every user it issued before is
// revoked.
func (ids *identities) signNamespace(ns, pub string, removed *time.Time) (string, error) {
	op, err := ids.files.readKey("operator", ids.state.Operator)
	if err != nil {
		return "", err
	}
	ac := jwt.NewAccountClaims(pub)
	ac.Name = NamespaceAccount(ns)
	if removed != nil {
		ac.Limits.Conn = 0
		ac.RevokeAt(jwt.All, *removed)
		return ids.encodeAccount(ac, op)
	}
	g := newGrants(ids.state.Prefix)
	for _, imp := range imports("WORKER imports") {
		ac.Imports.Add(importFrom(ids.state.Accounts[AccountToolbus], g, imp, ns))
	}
	return ids.encodeAccount(ac, op)
}

// RemoveNamespace retires namespace ns's account: pushed, its workers are
// disconnected and refused from then on. Its tools stay in the catalog
// until they are removed (toolbus tools remove, or the coordinator's stale
// tool TTL).
func (in *Installation) RemoveNamespace(ns string) (Change, error) {
	unlock, err := in.lockCurrent()
	if err != nil {
		return Change{}, err
	}
	defer unlock()
	cur := in.state.Namespaces[ns]
	if cur == nil || cur.Removed != nil {
		return Change{}, fmt.Errorf("no namespace %s (toolbus namespace list)", ns)
	}
	now := time.Now().UTC()
	token, err := in.ids.signNamespace(ns, cur.Account, &now)
	if err != nil {
		return Change{}, err
	}
	if err := replaceFile(in.files.accountJWTPath(cur.Account), []byte(token), 0o644); err != nil {
		return Change{}, err
	}
	cur.Removed = &now
	_ = os.Remove(in.CredsFile(WorkerUser(ns)))
	if err := in.servers.writePreload(); err != nil {
		return Change{}, err
	}
	if err := in.files.save(&in.state); err != nil {
		return Change{}, err
	}
	return Change{AccountJWTs: []string{token}}, nil
}

// AgentOptions say what an agent's user may do.
type AgentOptions struct {
	// ActsAs are the agents the user may act as: names, or patterns where
	// '*' stands for any run of characters and '?' for one. Without
	// ActsAs and Operator, the user acts as the agent of its own name.
	ActsAs []string
	// Operator users decide approvals, switch tools, read every call and
	// may act as any agent.
	Operator bool
	// Expires, when positive, is how long the user's credentials last.
	Expires time.Duration
	// Route is the route its results come on (22 letters and digits);
	// default a new one.
	Route string
}

// AddAgent makes a user of AGENTS whose signed JWT says which agents it
// may act as (tags messages.ClaimTagAgent+pattern, messages.ClaimTagOperator) and whose permissions
// let it receive its own inbox and its route's results, and writes its
// credentials (CredsFile(name)). The servers need no change: they check
// a user of AGENTS by its JWT's signature.
func (in *Installation) AddAgent(name string, opts AgentOptions) (Agent, error) {
	unlock, err := in.lockCurrent()
	if err != nil {
		return Agent{}, err
	}
	defer unlock()
	a, err := in.ids.addAgent(name, opts)
	if err != nil {
		return Agent{}, err
	}
	return *a, in.files.save(&in.state)
}

// reservedUsers are the services' users, whose names no agent may take.
func reservedUser(name string) bool {
	return name == UserCoordinator || name == UserIndexer || name == UserAuditor || name == UserSystem || strings.HasPrefix(name, "worker_")
}

func (ids *identities) addAgent(name string, opts AgentOptions) (*Agent, error) {
	if err := validUserName("agent user", name); err != nil {
		return nil, err
	}
	if reservedUser(name) {
		return nil, fmt.Errorf("agent user %q: the name of a service's user", name)
	}
	if cur := ids.state.Agents[name]; cur != nil && cur.Revoked == nil {
		return nil, fmt.Errorf("agent user %s exists; revoke it first (toolbus agent revoke %s)", name, name)
	}
	actsAs := opts.ActsAs
	if len(actsAs) == 0 && !opts.Operator {
		actsAs = []string{name}
	}
	for _, p := range actsAs {
		if err := messages.ValidateAgentPattern(p); err != nil {
			return nil, fmt.Errorf("--acts-as: %w", err)
		}
	}
	if opts.Expires < 0 {
		return nil, fmt.Errorf("--expires %v is negative", opts.Expires)
	}
	route := opts.Route
	if route == "" {
		route = newRoute()
	}
	if err := messages.ValidateRoute(route); err != nil {
		return nil, err
	}
	for other, a := range ids.state.Agents {
		if a.Revoked == nil && slices.Contains(a.Routes, route) {
			return nil, fmt.Errorf("route %s is agent user %s's", route, other)
		}
	}
	g := newGrants(ids.state.Prefix)
	var perms jwt.Permissions
	perms.Pub.Allow = g.subjects(permissions("agent publish"), "")
	perms.Sub.Allow = []string{"_INBOX_" + name + ".>", g.lower + ".results." + route + ".>"}
	var tags []string
	for _, p := range actsAs {
		tags = append(tags, messages.ClaimTagAgent+p)
	}
	if opts.Operator {
		tags = append(tags, messages.ClaimTagOperator)
	}
	now := time.Now().UTC()
	var expires *time.Time
	if opts.Expires > 0 {
		t := now.Add(opts.Expires).Truncate(time.Second)
		expires = &t
	}
	_ = os.Remove(ids.files.credsFile(name)) // a revoked user's
	user, err := ids.issueUser(name, ids.state.Accounts[AccountAgents], perms, tags, expires)
	if err != nil {
		return nil, err
	}
	a := &Agent{User: user, ActsAs: actsAs, Operator: opts.Operator, Routes: []string{route}, Added: now, Expires: expires}
	ids.state.Agents[name] = a
	return a, nil
}

// RevokeAgent revokes agent user name: AGENTS's JWT lists its key as
// revoked; pushed, the servers disconnect it and refuse it from then on.
func (in *Installation) RevokeAgent(name string) (Change, error) {
	unlock, err := in.lockCurrent()
	if err != nil {
		return Change{}, err
	}
	defer unlock()
	a := in.state.Agents[name]
	if a == nil || a.Revoked != nil {
		return Change{}, fmt.Errorf("no agent user %s (toolbus agent list)", name)
	}
	// Revoked at a time no earlier than its JWT's: the server revokes the
	// users issued at or before it.
	now := time.Now().UTC()
	if now.Before(a.Added) {
		now = a.Added
	}
	a.Revoked = &now
	token, err := in.ids.signAccount(AccountAgents)
	if err != nil {
		return Change{}, err
	}
	if err := replaceFile(in.files.accountJWTPath(in.state.Accounts[AccountAgents]), []byte(token), 0o644); err != nil {
		return Change{}, err
	}
	_ = os.Remove(in.CredsFile(name))
	if err := in.servers.writePreload(); err != nil {
		return Change{}, err
	}
	if err := in.files.save(&in.state); err != nil {
		return Change{}, err
	}
	return Change{AccountJWTs: []string{token}}, nil
}

// Agents are the agent users that are not revoked, by name.
func (in *Installation) Agents() map[string]Agent {
	out := map[string]Agent{}
	for name, a := range in.state.Agents {
		if a.Revoked == nil {
			out[name] = *a
		}
	}
	return out
}

// ParseExpiry reads a duration as Go writes them (90m, 720h), or a number
// of days (30d).
func ParseExpiry(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("--expires %q: want a duration such as 90m, 720h or 30d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("--expires " + strconv.Quote(s) + ": want a duration such as 90m, 720h or 30d")
	}
	return d, nil
}
