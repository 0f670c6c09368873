// Package setup makes and changes a Toolbus installation whose NATS
// identities are signed: an operator, the system account and the accounts
// of Toolbus's roles (TOOLBUS, AGENTS, INDEXER, AUDITOR, and one per worker
// namespace) as nkeys and JWTs, the nats-server configuration of each node
// with a full account resolver, and a credentials file per user. It is
// `toolbus setup`, `toolbus namespace` and `toolbus agent`.
//
// Everything lives in one directory:
//
//	installation.json   what the installation holds: nodes, public keys, namespaces, agents
//	keys/               the operator's and the accounts' seeds (0600), named by public key
//	jwt/                the operator's JWT and each account's current JWT
//	creds/              a credentials file per user (0600)
//	nats/n1.conf …      each node's configuration; nats/accounts.conf, which they
//	                    include, preloads every account's current JWT
//	nats/n1/ …          each node's JetStream store and resolver directory
//	console-tokens.yaml the console's operator token, mcp-tokens.yaml the MCP front's
//
// Keys are never overwritten: making an installation twice changes
// nothing, and a change (a namespace, an agent) adds keys and signs new
// JWTs, which Push sends to the running servers' resolver.
package setup

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/pkg/messages"
)

// The accounts of an installation besides the namespaces'.
const (
	AccountSystem  = "SYS"
	AccountToolbus = "TOOLBUS"
	AccountAgents  = "AGENTS"
	AccountIndexer = "INDEXER"
	AccountAuditor = "AUDITOR"
)

// The users setup makes besides the namespaces' workers.
const (
	UserCoordinator = "coordinator"
	UserIndexer     = "indexer"
	UserAuditor     = "auditor"
	UserSystem      = "sys"
	// UserAdmin is an operator of AGENTS, for the console and the
	// operators' command line.
	UserAdmin = "admin"
	// UserMCP is the MCP front's user of AGENTS: it acts as the agents its
	// tokens name, MCPAgent and MCPAgent-*.
	UserMCP = "mcp"
	// MCPAgent is the agent of the MCP front's first token.
	MCPAgent = "mcp"
)

// Options say how to make an installation.
type Options struct {
	// Dir holds the installation. Required.
	Dir string
	// Nodes is 1 (one server) or 3 (a cluster on one host). Default 1.
	Nodes int
	// Listen is host:port of the first node's clients; the others listen
	// on the next ports. Default 127.0.0.1:4222.
	Listen string
	// ClusterPort is the first node's route port; the others use the next
	// ones. Default: the client port plus 2000.
	ClusterPort int
	// Prefix of subjects and resources. Default "toolbus".
	Prefix string
	// Namespaces to make an account for, with their workers' users.
	Namespaces []string
}

// State is what installation.json holds: nothing secret.
type State struct {
	Version    int                   `json:"version"`
	Prefix     string                `json:"prefix"`
	Nodes      []Node                `json:"nodes"`
	Operator   string                `json:"operator"`
	Accounts   map[string]string     `json:"accounts"`
	Users      map[string]string     `json:"users"`
	Namespaces map[string]*Namespace `json:"namespaces"`
	Agents     map[string]*Agent     `json:"agents"`
	// OIDC is the identity provider whose tokens the auth callout
	// accepts, and its keys (oidc.go); nil without one.
	OIDC *OIDC `json:"oidc,omitempty"`
}

// Node is one nats-server of the installation.
type Node struct {
	Name string `json:"name"`
	// Client is host:port of the node's clients.
	Client string `json:"client"`
	// ClusterPort is its route port, 0 for a lone server.
	ClusterPort int `json:"cluster_port,omitempty"`
}

// Namespace is a worker namespace's account.
type Namespace struct {
	Account string     `json:"account"`
	User    string     `json:"user"`
	Added   time.Time  `json:"added"`
	Removed *time.Time `json:"removed,omitempty"`
}

// Agent is a user of AGENTS made by AddAgent.
type Agent struct {
	User     string     `json:"user"`
	ActsAs   []string   `json:"acts_as,omitempty"`
	Operator bool       `json:"operator,omitempty"`
	Routes   []string   `json:"routes"`
	Added    time.Time  `json:"added"`
	Expires  *time.Time `json:"expires,omitempty"`
	Revoked  *time.Time `json:"revoked,omitempty"`
}

// Installation is an installation's directory, opened by Setup or Open.
type Installation struct {
	dir   string
	state State
	// files are the directory's keys and files written once; ids signs
	// the installation's accounts and users; servers writes what the
	// nats-servers read.
	files   *store
	ids     *identities
	servers *serverConfig
}

// store is an installation's directory as files: the seeds of its keys,
// named by public key and never overwritten, its accounts' JWTs, its
// users' credentials and installation.json.
type store struct {
	dir string
}

// identities makes the installation's NATS identities and signs them: the
// accounts' JWTs with the operator's key, the users' with their account's.
// It changes the state and writes keys, JWTs and credentials; saving the
// state is its caller's.
type identities struct {
	state *State
	files *store
}

// serverConfig writes what the installation's nats-servers read: each
// node's configuration, and the accounts every node preloads.
type serverConfig struct {
	dir   string
	state *State
	files *store
}

// installation assembles the parts of the installation in dir.
func installation(dir string, state State) *Installation {
	in := &Installation{dir: dir, state: state, files: &store{dir: dir}}
	in.ids = &identities{state: &in.state, files: in.files}
	in.servers = &serverConfig{dir: dir, state: &in.state, files: in.files}
	return in
}

const stateFile = "installation.json"

// ErrNoInstallation is returned by Open for a directory Setup did not make.
var ErrNoInstallation = errors.New("no installation")

// Open reads the installation in dir.
func Open(dir string) (*Installation, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(abs, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s: make one with toolbus setup --dir %s", ErrNoInstallation, dir, dir)
	}
	if err != nil {
		return nil, err
	}
	var state State
	if err := json.Unmarshal(data, &state); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	in := installation(abs, state)
	if in.state.Namespaces == nil {
		in.state.Namespaces = map[string]*Namespace{}
	}
	if in.state.Agents == nil {
		in.state.Agents = map[string]*Agent{}
	}
	return in, nil
}

// Dir is the installation's directory, absolute.
func (in *Installation) Dir() string { return in.dir }

// State is a copy of what the installation holds.
func (in *Installation) State() State {
	data, _ := json.Marshal(in.state)
	var s State
	_ = json.Unmarshal(data, &s)
	return s
}

// URLs are the client URLs of the installation's nodes, comma-separated.
func (in *Installation) URLs() string {
	var urls []string
	for _, n := range in.state.Nodes {
		urls = append(urls, "nats://"+n.Client)
	}
	return strings.Join(urls, ",")
}

// CredsFile is the credentials file of a user.
func (in *Installation) CredsFile(user string) string { return in.files.credsFile(user) }

func (s *store) credsFile(user string) string {
	return filepath.Join(s.dir, "creds", user+".creds")
}

// CredsDir holds the credentials files, one per user: worker_<namespace>.creds
// for each namespace's workers.
func (in *Installation) CredsDir() string { return filepath.Join(in.dir, "creds") }

// NodeConfig is the nats-server configuration of node i (from 0).
func (in *Installation) NodeConfig(i int) string {
	return filepath.Join(in.dir, "nats", in.state.Nodes[i].Name+".conf")
}

// ConsoleTokens and MCPTokens are the tokens files setup writes for the
// console (an operator's token) and the MCP front (a token of agent
// MCPAgent).
func (in *Installation) ConsoleTokens() string { return filepath.Join(in.dir, "console-tokens.yaml") }
func (in *Installation) MCPTokens() string     { return filepath.Join(in.dir, "mcp-tokens.yaml") }

// Namespaces are the installation's namespaces, sorted, without removed ones.
func (in *Installation) Namespaces() []string {
	var out []string
	for name, ns := range in.state.Namespaces {
		if ns.Removed == nil {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Setup makes the installation opts.Dir says, or completes it: what
// exists is kept as it is, so running it twice changes nothing.
func Setup(opts Options) (*Installation, error) {
	if opts.Dir == "" {
		return nil, errors.New("setup: the installation's directory is required (--dir)")
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	unlock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	in, err := Open(opts.Dir)
	switch {
	case errors.Is(err, ErrNoInstallation):
		in, err = newInstallation(opts)
		if err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if err := in.state.sameOptions(opts); err != nil {
			return nil, err
		}
	}
	for _, ns := range opts.Namespaces {
		if err := messages.ValidateNamespace(ns); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
	}
	if err := in.complete(); err != nil {
		return nil, err
	}
	for _, ns := range opts.Namespaces {
		if cur := in.state.Namespaces[ns]; cur != nil && cur.Removed == nil {
			continue
		}
		if _, err := in.ids.addNamespace(ns); err != nil {
			return nil, err
		}
		if err := in.servers.writePreload(); err != nil {
			return nil, err
		}
	}
	if err := in.files.save(&in.state); err != nil {
		return nil, err
	}
	return in, nil
}

func newInstallation(opts Options) (*Installation, error) {
	abs, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	nodes, err := layout(opts)
	if err != nil {
		return nil, err
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = messages.DefaultPrefix
	}
	if _, err := messages.NewNames(prefix); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	return installation(abs, State{
		Version: 1, Prefix: prefix, Nodes: nodes,
		Accounts: map[string]string{}, Users: map[string]string{},
		Namespaces: map[string]*Namespace{}, Agents: map[string]*Agent{},
	}), nil
}

// layout places the nodes: consecutive client and route ports.
func layout(opts Options) ([]Node, error) {
	nodes := opts.Nodes
	if nodes == 0 {
		nodes = 1
	}
	if nodes != 1 && nodes != 3 {
		return nil, fmt.Errorf("setup: --nodes %d: an installation has 1 node or a cluster of 3", nodes)
	}
	listen := opts.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, portText, err := net.SplitHostPort(listen)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port <= 0 || port+nodes-1 > 65535 || host == "" {
		return nil, fmt.Errorf("setup: --listen %q: want host:port of the first node's clients, such as 127.0.0.1:4222", listen)
	}
	cluster := opts.ClusterPort
	if nodes > 1 && cluster == 0 {
		cluster = port + 2000
	}
	if nodes > 1 && (cluster <= 0 || cluster+nodes-1 > 65535) {
		return nil, fmt.Errorf("setup: --cluster-port %d is not a port", cluster)
	}
	var out []Node
	for i := range nodes {
		n := Node{Name: fmt.Sprintf("n%d", i+1), Client: net.JoinHostPort(host, strconv.Itoa(port+i))}
		if nodes > 1 {
			n.ClusterPort = cluster + i
		}
		out = append(out, n)
	}
	return out, nil
}

// sameOptions refuses options that contradict the installation made
// before: its nodes and prefix are chosen once.
func (st *State) sameOptions(opts Options) error {
	if opts.Nodes != 0 && opts.Nodes != len(st.Nodes) {
		return fmt.Errorf("setup: the installation in %s has %d node(s); --nodes %d would be another installation (use another --dir)", opts.Dir, len(st.Nodes), opts.Nodes)
	}
	if opts.Listen != "" && opts.Listen != st.Nodes[0].Client {
		return fmt.Errorf("setup: the installation in %s listens on %s; --listen %s would be another installation (use another --dir)", opts.Dir, st.Nodes[0].Client, opts.Listen)
	}
	if opts.Prefix != "" && opts.Prefix != st.Prefix {
		return fmt.Errorf("setup: the installation in %s has prefix %s, not %s", opts.Dir, st.Prefix, opts.Prefix)
	}
	return nil
}

// complete makes whatever of the installation's base is missing.
func (in *Installation) complete() error {
	op, err := in.files.key("operator", in.state.Operator, nkeys.PrefixByteOperator)
	if err != nil {
		return err
	}
	in.state.Operator = mustPublic(op)
	for _, name := range []string{AccountSystem, AccountToolbus, AccountAgents, AccountIndexer, AccountAuditor} {
		kp, err := in.files.key("account "+name, in.state.Accounts[name], nkeys.PrefixByteAccount)
		if err != nil {
			return err
		}
		in.state.Accounts[name] = mustPublic(kp)
	}
	if err := in.files.writeOnce(filepath.Join("jwt", "operator.jwt"), 0o644, func() ([]byte, error) {
		oc := jwt.NewOperatorClaims(in.state.Operator)
		oc.Name = "toolbus"
		oc.SystemAccount = in.state.Accounts[AccountSystem]
		token, err := oc.Encode(op)
		return []byte(token), err
	}); err != nil {
		return err
	}
	for _, name := range []string{AccountSystem, AccountToolbus, AccountAgents, AccountIndexer, AccountAuditor} {
		if err := in.files.writeOnce(in.files.accountJWTPath(in.state.Accounts[name]), 0o644, func() ([]byte, error) {
			token, err := in.ids.signAccount(name)
			return []byte(token), err
		}); err != nil {
			return err
		}
	}
	for _, u := range []struct{ user, account string }{
		{UserCoordinator, AccountToolbus}, {UserIndexer, AccountIndexer}, {UserAuditor, AccountAuditor}, {UserSystem, AccountSystem},
	} {
		if err := in.ids.serviceCreds(u.user, u.account); err != nil {
			return err
		}
	}
	if a := in.state.Agents[UserAdmin]; a == nil || a.Revoked != nil {
		if _, err := in.ids.addAgent(UserAdmin, AgentOptions{Operator: true}); err != nil {
			return err
		}
	}
	if a := in.state.Agents[UserMCP]; a == nil || a.Revoked != nil {
		if _, err := in.ids.addAgent(UserMCP, AgentOptions{ActsAs: []string{MCPAgent, MCPAgent + "-*"}}); err != nil {
			return err
		}
	}
	if err := in.files.writeOnce("console-tokens.yaml", 0o600, func() ([]byte, error) {
		return fmt.Appendf(nil, "# The console's login tokens (toolbus console --tokens); add a line per operator.\ntokens:\n  %s: {operator: %s}\n", randomToken(), UserAdmin), nil
	}); err != nil {
		return err
	}
	if err := in.files.writeOnce("mcp-tokens.yaml", 0o600, func() ([]byte, error) {
		return fmt.Appendf(nil, "# The MCP front's bearer tokens (toolbus mcp --tokens), each an agent the front's\n# user %s may act as (%s or %s-*).\ntokens:\n  %s: {agent: %s}\n", UserMCP, MCPAgent, MCPAgent, randomToken(), MCPAgent), nil
	}); err != nil {
		return err
	}
	for i := range in.state.Nodes {
		if err := in.files.writeOnce(filepath.Join("nats", in.state.Nodes[i].Name+".conf"), 0o644, func() ([]byte, error) {
			return []byte(in.servers.nodeConfig(i, NodePaths{})), nil
		}); err != nil {
			return err
		}
	}
	return in.servers.writePreload()
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func mustPublic(kp nkeys.KeyPair) string {
	pub, err := kp.PublicKey()
	if err != nil {
		panic(err)
	}
	return pub
}

// key reads the key whose public key is pub, or makes a new one when pub
// is empty. A key the installation knows but cannot read is an error: a
// new one would not be the one the servers trust.
func (s *store) key(what, pub string, prefix nkeys.PrefixByte) (nkeys.KeyPair, error) {
	if pub != "" {
		return s.readKey(what, pub)
	}
	kp, err := nkeys.CreatePair(prefix)
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	pub = mustPublic(kp)
	if err := s.createFile(s.keyPath(pub), seed, 0o600); err != nil {
		return nil, fmt.Errorf("setup: %s's key: %w", what, err)
	}
	return kp, nil
}

func (s *store) keyPath(pub string) string {
	return filepath.Join(s.dir, "keys", pub+".nk")
}

func (s *store) readKey(what, pub string) (nkeys.KeyPair, error) {
	path := s.keyPath(pub)
	seed, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("setup: %s's key %s: %w (restore it from a backup: the servers trust this key and no other)", what, path, err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil || mustPublic(kp) != pub {
		return nil, fmt.Errorf("setup: %s's key %s is not the seed of %s", what, path, pub)
	}
	return kp, nil
}

func (s *store) accountJWTPath(pub string) string {
	return filepath.Join(s.dir, "jwt", pub+".jwt")
}

// createFile writes a file that must not exist yet: a key is never
// overwritten.
func (s *store) createFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeOnce writes rel (relative to the directory) with what make
// returns, unless it exists.
func (s *store) writeOnce(rel string, mode os.FileMode, make func() ([]byte, error)) error {
	path := rel
	if !filepath.IsAbs(path) {
		path = filepath.Join(s.dir, rel)
	}
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	data, err := make()
	if err != nil {
		return fmt.Errorf("setup: %s: %w", rel, err)
	}
	if err := s.createFile(path, data, mode); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return nil
}

// replaceFile writes a file that is not a key, atomically.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// save writes installation.json.
func (s *store) save(st *State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return replaceFile(filepath.Join(s.dir, stateFile), append(data, '\n'), 0o644)
}

// signAccount signs the current claims of account name (one of the base
// accounts) with the operator's key.
func (ids *identities) signAccount(name string) (string, error) {
	op, err := ids.files.readKey("operator", ids.state.Operator)
	if err != nil {
		return "", err
	}
	pub := ids.state.Accounts[name]
	ac := jwt.NewAccountClaims(pub)
	ac.Name = name
	g := newGrants(ids.state.Prefix)
	toolbus := ids.state.Accounts[AccountToolbus]
	switch name {
	case AccountToolbus:
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit, MaxAckPending: jwt.NoLimit}
		for _, e := range exports() {
			x := &jwt.Export{Subject: jwt.Subject(g.subject(e.subject, "")), Type: jwt.Service, ResponseType: e.response, TokenReq: e.restricted}
			if e.stream {
				x.Type, x.ResponseType = jwt.Stream, ""
			}
			ac.Exports.Add(x)
		}
	case AccountAgents:
		kp, err := ids.files.readKey("account "+AccountToolbus, toolbus)
		if err != nil {
			return "", err
		}
		for _, imp := range imports("AGENTS imports") {
			i := importFrom(toolbus, g, imp, "")
			act := jwt.NewActivationClaims(pub)
			act.ImportSubject, act.ImportType = i.Subject, i.Type
			if i.Token, err = act.Encode(kp); err != nil {
				return "", err
			}
			ac.Imports.Add(i)
		}
		for _, a := range ids.state.Agents {
			if a.Revoked != nil {
				ac.RevokeAt(a.User, *a.Revoked)
			}
		}
		if ids.state.OIDC != nil {
			ac.SigningKeys.AddScopedSigner(ids.agentsScope())
		}
	case AccountAuth:
		ids.signAuth(ac)
	case AccountIndexer:
		for _, imp := range imports("INDEXER imports") {
			ac.Imports.Add(importFrom(toolbus, g, imp, ""))
		}
	case AccountAuditor:
		for _, imp := range imports("AUDITOR imports") {
			ac.Imports.Add(importFrom(toolbus, g, imp, ""))
		}
	}
	return ids.encodeAccount(ac, op)
}

func (ids *identities) encodeAccount(ac *jwt.AccountClaims, op nkeys.KeyPair) (string, error) {
	vr := jwt.CreateValidationResults()
	ac.Validate(vr)
	if errs := vr.Errors(); len(errs) > 0 {
		return "", fmt.Errorf("account %s: %v", ac.Name, errors.Join(errs...))
	}
	return ac.Encode(op)
}

func importFrom(exporter string, g grants, imp importOf, ns string) *jwt.Import {
	i := &jwt.Import{Account: exporter, Subject: jwt.Subject(g.subject(imp.subject, ns)), Type: jwt.Service, Share: imp.share}
	if imp.stream {
		i.Type = jwt.Stream
	}
	return i
}

// serviceCreds writes the credentials of a service user of account unless
// it has them.
func (ids *identities) serviceCreds(user, account string) error {
	if _, err := os.Stat(ids.files.credsFile(user)); err == nil {
		return nil
	}
	g := newGrants(ids.state.Prefix)
	perms := jwt.Permissions{}
	switch user {
	case UserCoordinator:
		perms.Pub.Allow, perms.Sub.Allow = g.subjects(permissions("coordinator publish"), ""), g.subjects(permissions("coordinator subscribe"), "")
	case UserIndexer:
		perms.Pub.Allow, perms.Sub.Allow = g.subjects(permissions("indexer publish"), ""), g.subjects(permissions("indexer subscribe"), "")
	case UserAuditor:
		perms.Pub.Allow, perms.Sub.Allow = g.subjects(permissions("auditor publish"), ""), g.subjects(permissions("auditor subscribe"), "")
	case UserSystem:
		// The system account's user pushes account JWTs to the servers'
		// resolver; it has the system account's every right.
	}
	pub, err := ids.issueUser(user, ids.state.Accounts[account], perms, nil, nil)
	if err != nil {
		return err
	}
	ids.state.Users[user] = pub
	return nil
}

// issueUser makes a user key and its JWT signed by the account whose
// public key is account, and writes its credentials file.
func (ids *identities) issueUser(user, account string, perms jwt.Permissions, tags []string, expires *time.Time) (string, error) {
	akp, err := ids.files.readKey("account of user "+user, account)
	if err != nil {
		return "", err
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	uc := jwt.NewUserClaims(mustPublic(ukp))
	uc.Name = user
	uc.Permissions = perms
	uc.Tags = tags // as written: an agent's name is case-sensitive
	if expires != nil {
		uc.Expires = expires.Unix()
	}
	token, err := uc.Encode(akp)
	if err != nil {
		return "", err
	}
	seed, err := ukp.Seed()
	if err != nil {
		return "", err
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return "", err
	}
	path := ids.files.credsFile(user)
	if err := ids.files.createFile(path, creds, 0o600); err != nil {
		return "", fmt.Errorf("setup: credentials of %s: %w", user, err)
	}
	return uc.Subject, nil
}

// writePreload writes nats/accounts.conf, which every node includes: the
// current JWT of every account, loaded into the node's resolver when it
// starts (a JWT older than the one the resolver holds is ignored).
func (sc *serverConfig) writePreload() error {
	var b strings.Builder
	b.WriteString("# Written by toolbus setup, toolbus namespace and toolbus agent: the current JWT\n# of every account, loaded by each node's resolver when it starts.\nresolver_preload: {\n")
	var pubs []string
	for _, pub := range sc.state.Accounts {
		pubs = append(pubs, pub)
	}
	for _, ns := range sc.state.Namespaces {
		pubs = append(pubs, ns.Account)
	}
	sort.Strings(pubs)
	for _, pub := range slices.Compact(pubs) {
		token, err := os.ReadFile(sc.files.accountJWTPath(pub))
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		fmt.Fprintf(&b, "  %s: %q\n", pub, strings.TrimSpace(string(token)))
	}
	b.WriteString("}\n")
	if sc.state.OIDC != nil {
		// A connection without credentials of its own (a token only) is
		// this bearer user of AUTH, whose callout says who it is.
		fmt.Fprintf(&b, "# A connection with a token and no credentials goes to the auth callout (toolbus authn).\ndefault_sentinel: %q\n", sc.state.OIDC.Sentinel)
	}
	return replaceFile(filepath.Join(sc.dir, "nats", "accounts.conf"), []byte(b.String()), 0o644)
}

// NodePaths overrides where a node keeps its data, and its ports, for a
// configuration written elsewhere than the installation's (tests run
// several servers of one installation side by side).
type NodePaths struct {
	// Store holds the node's JetStream store and its resolver's directory.
	Store string
	// Listen overrides the node's client address; ClusterPorts the route
	// ports of every node.
	Listen       string
	ClusterPorts []int
}

// WriteNodeConfig writes node i's configuration to path with paths'
// overrides, and the accounts it preloads beside it.
func (in *Installation) WriteNodeConfig(i int, path string, paths NodePaths) error {
	if err := replaceFile(filepath.Join(filepath.Dir(path), "accounts.conf"), mustRead(filepath.Join(in.dir, "nats", "accounts.conf")), 0o644); err != nil {
		return err
	}
	return replaceFile(path, []byte(in.servers.nodeConfig(i, paths)), 0o644)
}

func mustRead(path string) []byte {
	data, _ := os.ReadFile(path)
	return data
}

func (sc *serverConfig) nodeConfig(i int, paths NodePaths) string {
	node := sc.state.Nodes[i]
	storeDir := paths.Store
	if storeDir == "" {
		storeDir = filepath.Join(sc.dir, "nats", node.Name)
	}
	listen := node.Client
	if paths.Listen != "" {
		listen = paths.Listen
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Node %d of %d of the Toolbus installation in %s, written by toolbus setup.\n", i+1, len(sc.state.Nodes), sc.dir)
	b.WriteString("# Accounts and users are signed JWTs (operator mode) held by a full account\n# resolver: toolbus namespace and toolbus agent push their changes to it live.\n")
	fmt.Fprintf(&b, "#   nats-server -c %s\n", filepath.Join(sc.dir, "nats", node.Name+".conf"))
	fmt.Fprintf(&b, "server_name: toolbus-%s\n", node.Name)
	fmt.Fprintf(&b, "listen: %q\n", listen)
	b.WriteString("max_payload: 1MB\n")
	// A service user's JWT lists its permissions and comes with its
	// CONNECT line: the coordinator's is longer than the default 4 KiB.
	b.WriteString("max_control_line: 64KB\n")
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n}\n", storeDir) // the server keeps its streams in storeDir/jetstream
	fmt.Fprintf(&b, "operator: %q\n", filepath.Join(sc.dir, "jwt", "operator.jwt"))
	fmt.Fprintf(&b, "system_account: %s\n", sc.state.Accounts[AccountSystem])
	fmt.Fprintf(&b, "resolver {\n  type: full\n  dir: %q\n  allow_delete: false\n  interval: \"2m\"\n  timeout: \"2s\"\n}\n", filepath.Join(storeDir, "resolver"))
	b.WriteString("include \"accounts.conf\"\n")
	if len(sc.state.Nodes) > 1 {
		host, _, _ := net.SplitHostPort(node.Client)
		ports := paths.ClusterPorts
		if len(ports) == 0 {
			for _, n := range sc.state.Nodes {
				ports = append(ports, n.ClusterPort)
			}
		}
		var routes []string
		for j, n := range sc.state.Nodes {
			h, _, _ := net.SplitHostPort(n.Client)
			routes = append(routes, fmt.Sprintf("    nats-route://%s", net.JoinHostPort(h, strconv.Itoa(ports[j]))))
		}
		fmt.Fprintf(&b, "cluster {\n  name: toolbus\n  listen: %q\n  routes: [\n%s\n  ]\n}\n", net.JoinHostPort(host, strconv.Itoa(ports[i])), strings.Join(routes, "\n"))
	}
	return b.String()
}

// validUserName: a user's name is its inbox prefix's suffix and a file's
// name.
func validUserName(kind, name string) error {
	if name == "" || len(name) > 64 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return fmt.Errorf("%s %q: a name is 1 to 64 letters, digits, '_' and '-'", kind, name)
	}
	return nil
}

// newRoute is a route of its own for an agent's user: 22 letters and digits.
func newRoute() string { return nuid.Next() }
