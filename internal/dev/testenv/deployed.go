package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/worker"
)

// Deployed starts what deploy/nats configures, on one server: the
// server with the configuration's users (users.conf), a coordinator
// connected as its user with the configuration's identities and the
// policy given (YAML), and the demo namespace's worker, connected as its
// user, with slots. as connects as one of the configuration's users
// (the password its name says, its inbox prefix).
func Deployed(t testing.TB, policy string, slots int) (as func(user string) *nats.Conn) {
	t.Helper()
	as, _ = DeployedWithoutWorkers(t, policy)
	Worker(t, "", worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools(), Slots: slots})
	return as
}

// DeployedWithoutWorkers is Deployed without the demo namespace's
// worker, for a worker of another kind to serve it as its user; url is
// the server's.
func DeployedWithoutWorkers(t testing.TB, policy string) (as func(user string) *nats.Conn, url string) {
	t.Helper()
	deploy := filepath.Join(moduleRoot(t), "deploy", "nats")
	srv := ServerWith(t, natsserver.Config{ConfigFile: filepath.Join(deploy, "users.conf")})
	as = func(user string) *nats.Conn {
		return Connect(t, srv.URL(), nats.UserInfo(user, DeployedPassword(user)), nats.CustomInboxPrefix(natsflags.InboxPrefix(user)))
	}
	ids, err := coordinator.LoadIdentities(filepath.Join(deploy, "identities.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Conn, cfg.Identities, cfg.PolicyFile = as("coordinator"), ids, policyFile
	})
	return as, srv.URL()
}

// DeployedPassword is the password deploy/nats gives a user: its name,
// with "-" for "_", and "-secret".
func DeployedPassword(user string) string {
	return strings.ReplaceAll(user, "_", "-") + "-secret"
}
