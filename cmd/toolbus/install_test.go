package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
)

// TestInstallationCommands: toolbus setup, namespace and agent make and
// change an installation from the command line; what they cannot do is a
// usage mistake (exit status 2) that names what is wrong and writes
// nothing; with no server running a change is written and said to be
// loaded when the servers start.
func TestInstallationCommands(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	nowhere := "nats://127.0.0.1:1"
	dir := filepath.Join(t.TempDir(), "toolbus")
	run := func(wantStatus int, want string, args ...string) string {
		t.Helper()
		stdout, stderr, status := cli(t, bin, nowhere, args...)
		if status != wantStatus || !strings.Contains(stdout+stderr, want) {
			t.Fatalf("toolbus %v: exit status %d, want %d and %q\nstdout:\n%s\nstderr:\n%s", args, status, wantStatus, want, stdout, stderr)
		}
		return stdout
	}
	run(exitUsage, "--dir DIR is required", "setup")
	run(exitOK, "installation in "+dir, "setup", "--dir", dir, "--namespace", "demo")
	run(exitUsage, "1 node", "setup", "--dir", dir, "--nodes", "3")
	run(exitUsage, "takes no arguments", "setup", "--dir", dir, "demo")

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--acts-as", ">"}, "subject wildcard"},
		{[]string{"--acts-as", "team.>"}, "subject wildcard"},
		{[]string{"--acts-as", "*"}, "every agent"},
		{[]string{"--expires", "soon"}, "--expires"},
		{[]string{"--route", "mine"}, "route"},
	} {
		run(exitUsage, bad.want, append([]string{"agent", "add", "bot", "--dir", dir}, bad.args...)...)
		if _, err := os.Stat(filepath.Join(dir, "creds", "bot.creds")); err == nil {
			t.Fatalf("agent add %v wrote credentials", bad.args)
		}
	}
	run(exitOK, "creds/bot.creds", "agent", "add", "bot", "--dir", dir, "--acts-as", "triage-*", "--expires", "30d")
	if out := run(exitOK, "bot", "agent", "list", "--dir", dir); !strings.Contains(out, "triage-*") {
		t.Fatalf("agent list:\n%s", out)
	}
	run(exitUsage, "exists", "agent", "add", "bot", "--dir", dir)
	run(exitOK, "no server of the installation is running", "agent", "revoke", "bot", "--dir", dir)
	if out := run(exitOK, "admin", "agent", "list", "--dir", dir); strings.Contains(out, "bot") {
		t.Fatalf("a revoked agent listed:\n%s", out)
	}
	run(exitUsage, "no agent user bot", "agent", "revoke", "bot", "--dir", dir)

	run(exitOK, "no server of the installation is running", "namespace", "add", "ops", "--dir", dir)
	run(exitUsage, "exists", "namespace", "add", "ops", "--dir", dir)
	run(exitUsage, "namespace", "namespace", "add", "no.dots", "--dir", dir)
	if out := run(exitOK, "worker_ops.creds", "namespace", "list", "--dir", dir); !strings.Contains(out, "demo") {
		t.Fatalf("namespace list:\n%s", out)
	}
	run(exitOK, "removed", "namespace", "remove", "ops", "--dir", dir)
	run(exitUsage, "no namespace ops", "namespace", "remove", "ops", "--dir", dir)
	run(exitUsage, "toolbus setup --dir", "namespace", "list", "--dir", filepath.Join(t.TempDir(), "none"))

	// Credentials that cannot be read are named before any connection.
	truncated := filepath.Join(t.TempDir(), "truncated.creds")
	creds, err := os.ReadFile(filepath.Join(dir, "creds", "admin.creds"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(truncated, creds[:100], 0o600); err != nil {
		t.Fatal(err)
	}
	run(exitRequestFailed, truncated+": the user JWT cannot be read (truncated, or altered)", "--creds", truncated, "tools")
	run(exitUsage, "nats-server", "up", "--dir", dir, "--nats-server", filepath.Join(t.TempDir(), "no-such-program"))
}

// TestIdentityProviderCommandLine: the options of the identity provider are
// refused, naming what is wrong, before anything is asked of the servers
// or the issuer: an --oidc-… option without the issuer, an issuer that is
// no URL, no audience, the auth callout of an installation without an
// identity provider, a console login without its client or operators
// claim, and a --token that is not a JWT.
func TestIdentityProviderCommandLine(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	nowhere := "nats://127.0.0.1:1"
	dir := filepath.Join(t.TempDir(), "toolbus")
	for _, tc := range []struct {
		status int
		want   string
		args   []string
	}{
		{exitUsage, "need --oidc-issuer", []string{"setup", "--dir", dir, "--oidc-audience", "toolbus"}},
		{exitOK, "installation in " + dir, []string{"setup", "--dir", dir}},
		{exitUsage, "--oidc-issuer \"login.example.com\"", []string{"setup", "--dir", dir, "--oidc-issuer", "login.example.com", "--oidc-audience", "toolbus"}},
		{exitUsage, "--oidc-audience is required", []string{"setup", "--dir", dir, "--oidc-issuer", "https://login.example.com/realms/main"}},
		{exitUsage, "has no identity provider", []string{"authn", "--dir", dir}},
		{exitUsage, "must be positive", []string{"authn", "--dir", dir, "--queue", "0"}},
		{exitUsage, "need --oidc-issuer", []string{"console", "--listen", "127.0.0.1:0", "--oidc-operators-value", "toolbus-operators"}},
		{exitUsage, "needs --oidc-client-id and --oidc-operators-claim", []string{"console", "--listen", "127.0.0.1:0", "--oidc-issuer", "https://login.example.com/realms/main"}},
		{exitUsage, "need --oidc-issuer", []string{"mcp", "--resource", "https://mcp.example.com/mcp"}},
		{exitRequestFailed, "token: the token is not a JWT", []string{"--token", "not-a-token", "tools"}},
	} {
		stdout, stderr, status := cli(t, bin, nowhere, tc.args...)
		if status != tc.status || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("toolbus %v: exit status %d, want %d and %q\nstdout:\n%s\nstderr:\n%s", tc.args, status, tc.status, tc.want, stdout, stderr)
		}
	}
}
