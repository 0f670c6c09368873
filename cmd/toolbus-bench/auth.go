package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
)

// benchAccount is the account the baseline runs in when the bench runs
// under a deployment's authentication: the deployment has no user for a
// plain JetStream worker, so the bench adds one, in an account of its own.
const benchAccount = "TOOLBUS_BENCH_BASELINE"

// authSetup is a deployment's server configuration and the users the
// bench connects as: the coordinator, a worker of one namespace, and an
// agent user of exactly one agent, each with the inbox prefix its
// permissions allow.
type authSetup struct {
	configFile string // the deployment's configuration with the baseline's account added
	identities *coordinator.Identities
	users      map[string]*server.User
	worker     string // the worker user, worker_<namespace>
	namespace  string
	agentUser  string
	agent      string
	route      string // the agent user's route, the first its identity lists
}

// newAuthSetup reads a deployment's server configuration (accounts and
// users, as deploy/nats/users.conf) and the coordinator's identities
// file, and writes to dir the configuration the bench's server runs.
func newAuthSetup(configFile, identitiesFile, dir string) (*authSetup, error) {
	opts, err := server.ProcessConfigFile(configFile)
	if err != nil {
		return nil, fmt.Errorf("auth config: %w", err)
	}
	ids, err := coordinator.LoadIdentities(identitiesFile)
	if err != nil {
		return nil, err
	}
	a := &authSetup{identities: ids, users: map[string]*server.User{}}
	for _, u := range opts.Users {
		a.users[u.Username] = u
	}
	if a.users["coordinator"] == nil {
		return nil, fmt.Errorf("auth config %s: no user coordinator", configFile)
	}
	var names []string
	for name := range a.users {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if ns, ok := strings.CutPrefix(name, "worker_"); ok && a.worker == "" {
			a.worker, a.namespace = name, ns
		}
		id, ok := ids.Users[name]
		if ok && a.agentUser == "" && !id.Operator && len(id.Agents) == 1 && !strings.ContainsAny(id.Agents[0], "*?[") && len(id.Routes) > 0 {
			a.agentUser, a.agent, a.route = name, id.Agents[0], id.Routes[0]
		}
	}
	if a.worker == "" || a.agentUser == "" {
		return nil, fmt.Errorf("auth config %s: needs a worker_<namespace> user and, in %s, a user of exactly one agent with a route", configFile, identitiesFile)
	}
	conf, err := inlineIncludes(configFile, 0)
	if err != nil {
		return nil, err
	}
	i := strings.Index(conf, "\naccounts {")
	if i < 0 {
		return nil, fmt.Errorf("auth config %s: no accounts block", configFile)
	}
	i += len("\naccounts {")
	baseline := fmt.Sprintf("\n  %s { jetstream: enabled, users: [ { user: bench_baseline, password: bench_baseline } ] }\n", benchAccount)
	conf = conf[:i] + baseline + conf[i:]
	// The includes are inlined, so the text stands on its own in dir and
	// nothing is written beside the deployment's files.
	a.configFile = filepath.Join(dir, "bench-server.conf")
	if err := os.WriteFile(a.configFile, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return a, nil
}

// inlineIncludes returns a configuration file's text with each of its
// include lines replaced by the text of the file it names (relative to the
// including file's folder), so that the accounts block is in one text.
func inlineIncludes(configFile string, depth int) (string, error) {
	if depth > 8 {
		return "", fmt.Errorf("auth config %s: includes nested too deep", configFile)
	}
	text, err := os.ReadFile(configFile)
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(text), "\n")
	for i, line := range lines {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "include ")
		if !ok {
			continue
		}
		name = strings.Trim(strings.TrimSpace(name), `"'`)
		if !filepath.IsAbs(name) {
			name = filepath.Join(filepath.Dir(configFile), name)
		}
		if lines[i], err = inlineIncludes(name, depth+1); err != nil {
			return "", err
		}
	}
	return strings.Join(lines, "\n"), nil
}

func (a *authSetup) close() { _ = os.Remove(a.configFile) }

// connect connects as user, with the inbox prefix that user's permissions
// allow.
func (a *authSetup) connect(url, user string) (*nats.Conn, error) {
	if user == "bench_baseline" {
		return nats.Connect(url, nats.UserInfo(user, user))
	}
	u := a.users[user]
	if u == nil {
		return nil, fmt.Errorf("auth config: no user %s", user)
	}
	return nats.Connect(url, nats.UserInfo(u.Username, u.Password), nats.CustomInboxPrefix(natsflags.InboxPrefix(user)))
}
