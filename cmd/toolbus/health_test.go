package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
)

// TestFrontsServeProbes: the console and the MCP front with
// --metrics-listen serve /healthz and /readyz, which toolbus health asks
// (a container's health check): ready while their NATS connection is up,
// 503 and exit status 1 once it is down, while /healthz stays 200.
func TestFrontsServeProbes(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	bin := testenv.Binary(t, "./cmd/toolbus")
	tokens := filepath.Join(t.TempDir(), "console-tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n  console-token-0123456789: {operator: alice}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := regexp.MustCompile(`addr=(\S+)`)
	probes := map[string]string{}
	for name, args := range map[string][]string{
		"console": {"console", "--listen", "127.0.0.1:0", "--tokens", tokens},
		"mcp":     {"--agent", "probe", "mcp", "--listen", "127.0.0.1:0"},
	} {
		p := testenv.Start(t, bin, append([]string{"--server", srv.URL()}, append(args, "--metrics-listen", "127.0.0.1:0")...)...)
		probes[name] = "http://" + addr.FindStringSubmatch(p.WaitLine(t, "serving metrics and health"))[1]
	}
	for name, base := range probes {
		for _, path := range []string{"/healthz", "/readyz"} {
			if out, stderr, status := cli(t, bin, srv.URL(), "health", base+path); status != 0 || !strings.Contains(out, "ok") {
				t.Errorf("%s %s: status %d\n%s%s", name, path, status, out, stderr)
			}
		}
	}
	srv.Shutdown()
	for name, base := range probes {
		out, stderr, status := cli(t, bin, "nats://127.0.0.1:1", "health", base+"/readyz")
		if status != 1 || !strings.Contains(stderr, "503") || !strings.Contains(stderr, "not connected to NATS") {
			t.Errorf("%s /readyz without NATS: status %d\n%s%s", name, status, out, stderr)
		}
		if _, stderr, status := cli(t, bin, "nats://127.0.0.1:1", "health", base+"/healthz"); status != 0 {
			t.Errorf("%s /healthz without NATS: status %d\n%s", name, status, stderr)
		}
	}
}

// TestHealthRefusesWhatIsNotAURL: toolbus health takes one http(s) URL; a
// mistake is the usage status, a server that does not answer is 1.
func TestHealthRefusesWhatIsNotAURL(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	for _, tc := range []struct {
		args   []string
		status int
		says   string
	}{
		{[]string{"health"}, exitUsage, "takes one URL"},
		{[]string{"health", "ftp://127.0.0.1/readyz"}, exitUsage, "is not an http:// or https:// URL"},
		{[]string{"health", "127.0.0.1:9464/readyz"}, exitUsage, "is not an http:// or https:// URL"},
		{[]string{"health", "--timeout", "0s", "http://127.0.0.1:1/readyz"}, exitUsage, "--timeout must be positive"},
		{[]string{"health", "http://127.0.0.1:1/readyz"}, 1, "127.0.0.1:1/readyz"},
	} {
		_, stderr, status := cli(t, bin, "nats://127.0.0.1:1", tc.args...)
		if status != tc.status || !strings.Contains(stderr, tc.says) {
			t.Errorf("%q: status %d, want %d saying %q:\n%s", tc.args, status, tc.status, tc.says, stderr)
		}
	}
}
