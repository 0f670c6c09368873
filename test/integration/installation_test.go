package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
)

// The confinement tests run against both ways of installing Toolbus, with
// the same assertions:
//
//   - passwords: deploy/nats/users.conf (users.inc's accounts, users and
//     passwords), the coordinator reading deploy/nats/identities.yaml;
//   - signed: an installation made by toolbus setup (operator, accounts and
//     users as JWTs under a full account resolver), whose agents' users
//     carry what they may do in their JWTs, the coordinator without an
//     identities file.
//
// Both have the same users: coordinator, indexer, auditor, worker_demo,
// worker_payments, and in AGENTS agent_a (support-bot), agent_b
// (billing-bot, triage-*) and operator, on the routes deployRoutes says.
type deployKind string

const (
	passwords deployKind = "passwords"
	signed    deployKind = "signed"
)

// forEachDeploy runs test against each kind of installation, in parallel.
func forEachDeploy(t *testing.T, test func(t *testing.T, kind deployKind)) {
	t.Helper()
	for _, kind := range []deployKind{passwords, signed} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			test(t, kind)
		})
	}
}

// deployed is a running server of one installation.
type deployed struct {
	kind deployKind
	srv  *natsserver.Server
	url  string
	// ids is what the coordinator is given: identities.yaml with
	// passwords, nothing with signed identities.
	ids *coordinator.Identities
	// in is the signed installation.
	in *setup.Installation
}

// startDeploy starts a server of an installation of kind: with passwords,
// users.conf, and namespace payments added as users.inc says when
// payments is set; signed, the shared installation of setupInstallation,
// which has payments.
func startDeploy(t *testing.T, kind deployKind, payments bool) *deployed {
	t.Helper()
	d := &deployed{kind: kind}
	var conf string
	switch kind {
	case passwords:
		conf = filepath.Join(deployDir(t), "users.conf")
		if payments {
			conf = deployWithNamespace(t, "payments")
		}
		d.ids = deployIdentities(t)
	case signed:
		d.in = setupInstallation(t)
		conf = filepath.Join(t.TempDir(), "n1.conf")
		if err := d.in.WriteNodeConfig(0, conf, setup.NodePaths{Store: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
	}
	srv := testenv.ServerWith(t, natsserver.Config{ConfigFile: conf})
	d.srv, d.url = srv, srv.URL()
	return d
}

// opts are the options of a connection as user: its credentials, and its
// own inbox prefix, as the commands and the agents' programs connect.
func (d *deployed) opts(user string) []nats.Option {
	if d.kind == signed {
		return []nats.Option{nats.UserCredentials(d.in.CredsFile(user)), nats.CustomInboxPrefix(natsflags.InboxPrefix(user)), nats.Name(user)}
	}
	return deployUser(user, deployPassword(user))
}

// as connects as user.
func (d *deployed) as(t *testing.T, user string, extra ...nats.Option) *nats.Conn {
	t.Helper()
	return testenv.Connect(t, d.url, append(d.opts(user), extra...)...)
}

// connector connects as a user, for the tests written with an as(user).
func (d *deployed) connector(t *testing.T) func(user string) *nats.Conn {
	return func(user string) *nats.Conn { return d.as(t, user) }
}

// intruder connects as user, to try what its role may not.
func (d *deployed) intruder(t *testing.T, user string) *intruder {
	return newIntruderWith(t, d.url, user, d.opts(user))
}

// connUser is the user a connection of a deployment is of.
func connUser(nc *nats.Conn) string {
	if nc.Opts.User != "" {
		return nc.Opts.User
	}
	return nc.Opts.Name
}

var (
	installOnce sync.Once
	installed   *setup.Installation
	installErr  error
	installDir  string
)

// setupInstallation is the signed installation the confinement tests
// share: made once per test binary, as toolbus setup and toolbus agent add
// make one. Each test runs a server of its own on it.
func setupInstallation(t *testing.T) *setup.Installation {
	t.Helper()
	installOnce.Do(func() {
		installDir, installErr = os.MkdirTemp("", "toolbus-setup-")
		if installErr != nil {
			return
		}
		installed, installErr = newSignedInstallation(installDir)
	})
	if installErr != nil {
		t.Fatalf("toolbus setup: %v", installErr)
	}
	return installed
}

// newSignedInstallation makes an installation in dir with the users of
// the deploy configuration.
func newSignedInstallation(dir string) (*setup.Installation, error) {
	in, err := setup.Setup(setup.Options{Dir: dir, Namespaces: []string{"demo", "payments"}})
	if err != nil {
		return nil, err
	}
	for _, a := range []struct {
		user string
		opts setup.AgentOptions
	}{
		{"agent_a", setup.AgentOptions{ActsAs: []string{"support-bot"}}},
		{"agent_b", setup.AgentOptions{ActsAs: []string{"billing-bot", "triage-*"}}},
		{"operator", setup.AgentOptions{Operator: true}},
	} {
		a.opts.Route = deployRoutes[a.user]
		if _, err := in.AddAgent(a.user, a.opts); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// removeInstallation removes the shared installation after the tests.
func removeInstallation() {
	if installDir != "" {
		_ = os.RemoveAll(installDir)
	}
}

// rawConnect is the CONNECT line of a connection as user that writes the
// protocol by hand; info is the server's INFO line.
func (d *deployed) rawConnect(t *testing.T, user, info string) string {
	t.Helper()
	if d == nil || d.kind != signed {
		return fmt.Sprintf("CONNECT {\"user\":%q,\"pass\":%q,\"headers\":true,\"verbose\":false,\"protocol\":1}\r\n", user, deployPassword(user))
	}
	var server struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(info), "INFO ")), &server); err != nil || server.Nonce == "" {
		t.Fatalf("server greeting without a nonce: %q", info)
	}
	creds, err := os.ReadFile(d.in.CredsFile(user))
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign([]byte(server.Nonce))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("CONNECT {\"jwt\":%q,\"sig\":%q,\"headers\":true,\"verbose\":false,\"protocol\":1}\r\n", token, base64.RawURLEncoding.EncodeToString(sig))
}

// userJWT is the JWT of a signed installation's user, "" with passwords.
func (d *deployed) userJWT(t *testing.T, user string) string {
	t.Helper()
	if d == nil || d.kind != signed {
		return ""
	}
	creds, err := os.ReadFile(d.in.CredsFile(user))
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	return token
}
