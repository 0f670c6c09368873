package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/dev/testenv"
)

// documentedCommands returns the command lines of the shell blocks of a
// section of docs/operations.md, in order.
func documentedCommands(t *testing.T, section string) [][]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(deployDir(t)), "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "\n## "+section+"\n")
	if start < 0 {
		t.Fatalf("operations.md has no section %q", section)
	}
	text = text[start+1:]
	if end := strings.Index(text[3:], "\n## "); end >= 0 {
		text = text[:end+3]
	}
	var blocks [][]string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text, -1) {
		blocks = append(blocks, strings.Split(strings.TrimSpace(m[1]), "\n"))
	}
	return blocks
}

// installed holds the binaries the first command of "Production on one
// host" installs, for every test of the package that runs them.
var installedBin struct {
	sync.Mutex
	dir string
}

// installDocumented runs the documented install command once, with GOBIN
// a directory of its own, and returns that directory.
func installDocumented(t *testing.T, line, root string, env []string) string {
	t.Helper()
	installedBin.Lock()
	defer installedBin.Unlock()
	if installedBin.dir != "" {
		return installedBin.dir
	}
	dir, err := os.MkdirTemp("", "toolbus-installed-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Dir, cmd.Env = root, append(env, "GOBIN="+dir, "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	installedBin.dir = dir
	return dir
}

func removeInstalled() {
	installedBin.Lock()
	defer installedBin.Unlock()
	if installedBin.dir != "" {
		_ = os.RemoveAll(installedBin.dir)
	}
}

// upProcess is a running toolbus up, its output read line by line.
type upProcess struct {
	cmd     *exec.Cmd
	lines   chan string
	exited  chan error
	output  []string
	stopped bool
}

// startUp starts toolbus up and waits until it says it is ready; the test's
// end stops it, and a failed test logs the named services' logs of dir.
func startUp(t *testing.T, up *exec.Cmd, dir string, logs ...string) *upProcess {
	t.Helper()
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	up.Stderr = up.Stdout
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	u := &upProcess{cmd: up, lines: make(chan string, 64), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			u.lines <- sc.Text()
		}
		close(u.lines)
		u.exited <- up.Wait()
	}()
	t.Cleanup(func() {
		if !u.stopped {
			_ = up.Process.Signal(syscall.SIGINT)
			<-u.exited
		}
		if t.Failed() {
			for _, name := range logs {
				log, _ := os.ReadFile(filepath.Join(dir, "log", name+".log"))
				t.Logf("%s.log:\n%s", name, log)
			}
		}
	})
	u.waitLine(t, 2*time.Minute, "is not ready", func(line string) bool { return strings.HasPrefix(line, "toolbus up: ready") })
	return u
}

// waitLine reads toolbus up's output until a line matches.
func (u *upProcess) waitLine(t *testing.T, bound time.Duration, failure string, match func(string) bool) {
	t.Helper()
	for {
		select {
		case line, ok := <-u.lines:
			if !ok {
				t.Fatalf("toolbus up exited:\n%s", strings.Join(u.output, "\n"))
			}
			u.output = append(u.output, line)
			if match(line) {
				return
			}
		case <-time.After(bound):
			t.Fatalf("toolbus up %s after %v:\n%s", failure, bound, strings.Join(u.output, "\n"))
		}
	}
}

// TestProductionOnOneHost runs exactly the commands of docs/operations.md's
// "Production on one host", on a fresh directory in place of
// /var/lib/toolbus and on free ports (given by the variables the commands
// read), with the binaries the first command installs: the installation
// comes up with every service, a call is made through the command line
// (of each namespace) and the MCP front, the console shows them, a killed
// service is started again, and toolbus up stops everything on SIGINT.
func TestProductionOnOneHost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole installation")
	}
	t.Parallel()
	blocks := documentedCommands(t, "Production on one host")
	if len(blocks) < 2 || len(blocks[0]) > 5 {
		t.Fatalf("the section's first block has %d commands (at most 5), then the usage: %v", len(blocks[0]), blocks)
	}
	dir := filepath.Join(t.TempDir(), "toolbus")
	natsAddr, consoleAddr, mcpAddr := testenv.FreeAddress(t), testenv.FreeAddress(t), testenv.FreeAddress(t)
	root := filepath.Dir(filepath.Dir(deployDir(t)))
	install := blocks[0]
	bin := installDocumented(t, install[0], root, os.Environ())
	env := append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TOOLBUS_URL=nats://"+natsAddr, "TOOLBUS_CONSOLE_LISTEN="+consoleAddr, "TOOLBUS_MCP_LISTEN="+mcpAddr)
	shell := func(line string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", "exec "+strings.ReplaceAll(line, "/var/lib/toolbus", dir))
		cmd.Dir, cmd.Env = root, env
		return cmd
	}
	run := func(line string) string {
		t.Helper()
		out, err := shell(line).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		return string(out)
	}
	// The first command installed the binaries; the last runs the
	// installation until it is stopped.
	for _, line := range install[1 : len(install)-1] {
		run(line)
	}
	up := startUp(t, shell(install[len(install)-1]), dir, "nats-n1", "coordinator-1", "worker", "indexer", "console", "mcp")

	// The command line: the documented agent and call, and a call of the
	// second namespace.
	usage := blocks[1]
	for _, line := range usage {
		out := run(line)
		if strings.Contains(line, " call ") && !strings.Contains(out, "hello") {
			t.Fatalf("%s printed:\n%s", line, out)
		}
	}
	if out := run(fmt.Sprintf("toolbus --creds %s/creds/admin.creds call ops-word_count '{\"text\":\"two namespaces\"}'", dir)); !strings.Contains(out, `"words": 2`) {
		t.Fatalf("a call of namespace ops:\n%s", out)
	}

	// The MCP front, with the token setup wrote.
	mc := testenv.MCPClient(t, "http://"+mcpAddr+"/mcp", testenv.InstallationMCPToken(t, filepath.Join(dir, "mcp-tokens.yaml")))
	ctx := testenv.Context(t)
	req := mcp.CallToolRequest{}
	req.Params.Name = "demo-echo"
	req.Params.Arguments = map[string]any{"text": "through the MCP front"}
	res, err := mc.CallTool(ctx, req)
	if err != nil || res.IsError || len(res.Content) == 0 {
		t.Fatalf("MCP tools/call: %+v %v", res, err)
	}
	if text, ok := res.Content[0].(mcp.TextContent); !ok || text.Text != "through the MCP front" {
		t.Fatalf("MCP tools/call answered %+v", res.Content)
	}

	// The console, with the operator's token: the calls are in its
	// execution log.
	tokens, err := os.ReadFile(filepath.Join(dir, "console-tokens.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	consoleToken := regexp.MustCompile(`(?m)^  ([0-9a-f]{48}): \{operator: admin\}`).FindStringSubmatch(string(tokens))
	if consoleToken == nil {
		t.Fatalf("console-tokens.yaml:\n%s", tokens)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "http://" + consoleAddr
	resp, err := hc.PostForm(base+"/login", url.Values{"token": {consoleToken[1]}})
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
	if session == nil {
		t.Fatalf("console login: %s", resp.Status)
	}
	page := func(path string) string {
		req, err := http.NewRequest("GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(session)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("console %s: %s\n%s", path, resp.Status, body)
		}
		return string(body)
	}
	if calls := page("/calls"); !strings.Contains(calls, "demo-echo") || !strings.Contains(calls, "ops-word_count") || !strings.Contains(calls, "support-bot") {
		t.Fatalf("the console's execution log does not show the calls:\n%s", calls)
	}
	if catalog := page("/catalog"); !strings.Contains(catalog, "ops-echo") || !strings.Contains(catalog, "demo-echo") {
		t.Fatalf("the console's catalog does not show both namespaces:\n%s", catalog)
	}

	// A service that dies is started again (where /proc shows the
	// processes).
	_, proc := os.Stat("/proc/self/stat")
	if indexer := childOf(t, up.cmd.Process.Pid, "indexer"); proc == nil {
		if indexer == 0 {
			t.Fatal("toolbus up runs no indexer process")
		}
		if err := syscall.Kill(indexer, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		up.waitLine(t, testenv.Patience, "did not start the killed indexer again", func(line string) bool {
			return strings.Contains(line, "indexer stopped") && strings.Contains(line, "starting it again")
		})
		testenv.Eventually(t, "a new indexer process", func() bool {
			pid := childOf(t, up.cmd.Process.Pid, "indexer")
			return pid > 0 && pid != indexer
		})
	}

	// SIGINT stops the services, then the server.
	up.stopped = true
	if err := up.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range up.lines {
	}
	select {
	case err := <-up.exited:
		if err != nil {
			t.Fatalf("toolbus up after SIGINT: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("toolbus up did not stop within two minutes")
	}
	if conn, err := net.DialTimeout("tcp", natsAddr, time.Second); err == nil {
		conn.Close()
		t.Fatal("the NATS server still listens after toolbus up stopped")
	}
}

// childOf is the process ID of the child of parent whose program is name,
// read from /proc; 0 when there is none, or no /proc (the check is then
// left out).
func childOf(t *testing.T, parent int, name string) int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		data, err := os.ReadFile(stat)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...
		text := string(data)
		open, closing := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(text[closing+1:])
		var pid, ppid int
		if _, err := fmt.Sscan(text[:open], &pid); err != nil || len(fields) < 2 {
			continue
		}
		if _, err := fmt.Sscan(fields[1], &ppid); err != nil {
			continue
		}
		if ppid == parent && text[open+1:closing] == name {
			return pid
		}
	}
	return 0
}
