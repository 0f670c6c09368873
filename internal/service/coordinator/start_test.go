package coordinator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/messages"
)

func TestConfigValidation(t *testing.T) {
	conn := &nats.Conn{}
	tests := []struct {
		name      string
		cfg       Config
		wantField string // empty: valid
	}{
		{"defaults", Config{Conn: conn}, ""},
		{"no connection", Config{}, "Conn"},
		{"bad prefix", Config{Conn: conn, Prefix: "a b"}, "Prefix"},
		{"negative request limit", Config{Conn: conn, MaxConcurrentRequests: -1}, "MaxConcurrentRequests"},
		{"negative argument limit", Config{Conn: conn, MaxArgumentsBytes: -1}, "MaxArgumentsBytes"},
		{"negative sweep interval", Config{Conn: conn, SweepInterval: -time.Second}, "SweepInterval"},
		{"negative wait", Config{Conn: conn, MaxWait: -time.Second}, "MaxWait"},
		{"negative grant", Config{Conn: conn, GrantTTL: -time.Second}, "GrantTTL"},
		{"negative unavailable wait", Config{Conn: conn, UnavailableWait: -time.Second}, "UnavailableWait"},
		{"unavailable wait past the duplicate window", Config{Conn: conn, UnavailableWait: 3 * time.Minute}, "UnavailableWait"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.withDefaults().validate()
			if tc.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantField) {
				t.Errorf("err = %v, want ErrInvalidConfig naming %s", err, tc.wantField)
			}
		})
	}
}

func TestStopStackRunsInReverse(t *testing.T) {
	var order []string
	var s stopStack
	for _, name := range []string{"a", "b", "c"} {
		s.push(name, func(context.Context) error {
			order = append(order, name)
			if name == "b" {
				return errors.New("b would not stop")
			}
			return nil
		})
	}
	s.unwind(context.Background(), discardLogger())
	s.unwind(context.Background(), discardLogger())
	if got := strings.Join(order, ""); got != "cba" {
		t.Errorf("stopped %q, want cba once each", got)
	}
}

// startEnv is a server, a connection and a coordinator with everything it
// can run: a workspace and a policy file to watch, and the built-in tools.
func startEnv(t *testing.T) (*Coordinator, *nats.Conn, func()) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("default: allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Conn: nc, WorkspaceDir: dir, PolicyFile: policyFile, SweepInterval: 10 * time.Millisecond, WorkspaceReloadInterval: 10 * time.Millisecond, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return c, nc, func() {
		nc.Close()
		srv.Stop()
	}
}

func answers(t *testing.T, c *Coordinator, nc *nats.Conn) bool {
	t.Helper()
	_, err := nc.Request(c.names.APIGroup()+"."+messages.EndpointToolsList, nil, 5*time.Second)
	if err != nil && !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("tools.list: %v", err)
	}
	return err == nil
}

func TestStartAndStopLeaveNothingRunning(t *testing.T) {
	c, nc, closeAll := startEnv(t)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !answers(t, c, nc) {
		t.Fatal("a started coordinator does not answer")
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if answers(t, c, nc) {
		t.Error("a stopped coordinator answers")
	}
	closeAll()
	leaks.VerifyNone(t)
}

func TestStartThatFailsLeavesNothingRunning(t *testing.T) {
	c, nc, closeAll := startEnv(t)
	late := errors.New("the last step failed")
	steps := append(c.startSteps(), startStep{"last", func(context.Context) (func(context.Context) error, error) { return nil, late }})
	if err := c.start(context.Background(), steps); !errors.Is(err, late) {
		t.Fatalf("start = %v, want the last step's error", err)
	}
	if answers(t, c, nc) {
		t.Error("a coordinator that failed to start answers")
	}
	// Once its connection is closed, nothing the coordinator started may
	// still run: the sweeper, the watchers, the catalog and discovery
	// followers and the built-in tools' worker are stopped.
	closeAll()
	leaks.VerifyNone(t)
}
