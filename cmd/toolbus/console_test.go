package main

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
)

// TestConsoleNeedsTokens: toolbus console refuses to start without the
// operators' tokens, with the usage status.
func TestConsoleNeedsTokens(t *testing.T) {
	t.Parallel()
	url, bin := stack(t)
	_, stderr, status := cli(t, bin, url, "console", "--listen", "127.0.0.1:0")
	if status != exitUsage || !strings.Contains(stderr, "TOOLBUS_CONSOLE_TOKENS") {
		t.Fatalf("console without tokens: status %d\n%s", status, stderr)
	}
}

// TestConsoleServesOperators: toolbus console prints its URL, sends a
// browser without a session to the login page, and shows the catalog to
// an operator who logged in with a token of its tokens file.
func TestConsoleServesOperators(t *testing.T) {
	t.Parallel()
	natsURL, bin := stack(t)
	tokens := filepath.Join(t.TempDir(), "console-tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n  console-token-0123456789: {operator: alice}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testenv.Start(t, bin, "--server", natsURL, "console", "--listen", "127.0.0.1:0", "--tokens", tokens)
	base := strings.TrimSuffix(regexp.MustCompile(`http://\S+/`).FindString(p.WaitLine(t, "Admin console:")), "/")
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(base + "/catalog")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("catalog without a session: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	resp, err = hc.PostForm(base+"/login", url.Values{"token": {"console-token-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "toolbus_console" {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil {
		t.Fatalf("login: %s, cookies %v", resp.Status, resp.Cookies())
	}
	req, err := http.NewRequest("GET", base+"/catalog", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(session)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "demo-echo") || !strings.Contains(string(page), "alice") {
		t.Fatalf("catalog: %s %v\n%s", resp.Status, err, page)
	}
}

// TestDevPrintsTheConsoleURL: toolbus dev prints the console's URL beside
// the MCP endpoint, and the console answers there without a login.
func TestDevPrintsTheConsoleURL(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	dev := testenv.Start(t, bin, "dev", "--port", "0", "--data", t.TempDir())
	line := dev.WaitLine(t, "Admin console:")
	if !strings.Contains(line, "loopback") {
		t.Errorf("the console line does not say it serves loopback without a login: %q", line)
	}
	base := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(line)
	if base == "" {
		t.Fatalf("no console URL in %q", line)
	}
	dev.WaitLine(t, "Press Ctrl-C")
	resp, err := http.Get(base + "approvals")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "No approvals are pending") {
		t.Fatalf("console of toolbus dev: %s\n%s", resp.Status, page)
	}
}
