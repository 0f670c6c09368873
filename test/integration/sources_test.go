package integration

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources/mcp"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
	"github.com/toolbus/toolbus/pkg/worker"
)

// everythingServer returns the path of the MCP reference server that
// package-lock.json pins.
func everythingServer(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	bin := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "node_modules", ".bin", "mcp-server-everything")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the MCP test server is not installed (%v): run `npm ci` at the repository root", err)
	}
	return bin
}

// rpcMessage is what the tests read of a JSON-RPC message sent to a server.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string          `json:"name"`
		RequestID json.RawMessage `json:"requestId"`
		Reason    string          `json:"reason"`
	} `json:"params"`
}

// wireTap records the JSON-RPC messages that reach an MCP server, so that
// a test can see what the server was told.
type wireTap struct {
	mu      sync.Mutex
	msgs    []rpcMessage
	changed chan struct{}
}

func newWireTap() *wireTap { return &wireTap{changed: make(chan struct{})} }

func (w *wireTap) record(data []byte) {
	data = bytes.TrimSpace(data)
	var batch []rpcMessage
	if len(data) > 0 && data[0] == '[' {
		_ = json.Unmarshal(data, &batch)
	} else {
		var m rpcMessage
		if json.Unmarshal(data, &m) == nil {
			batch = []rpcMessage{m}
		}
	}
	if len(batch) == 0 {
		return
	}
	w.mu.Lock()
	w.msgs = append(w.msgs, batch...)
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// await returns the first recorded message that match accepts, waiting for it.
func (w *wireTap) await(t *testing.T, what string, match func(rpcMessage) bool) rpcMessage {
	t.Helper()
	timeout := time.After(testenv.Patience)
	for {
		w.mu.Lock()
		changed := w.changed
		for _, m := range w.msgs {
			if match(m) {
				w.mu.Unlock()
				return m
			}
		}
		w.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the server was never sent %s", what)
		}
	}
}

// cancellationOf waits until the server was told to cancel the tools/call
// of tool and returns that cancellation.
func (w *wireTap) cancellationOf(t *testing.T, tool string) rpcMessage {
	t.Helper()
	call := w.await(t, "a tools/call of "+tool, func(m rpcMessage) bool {
		return m.Method == "tools/call" && m.Params.Name == tool
	})
	return w.await(t, "notifications/cancelled for request "+string(call.ID), func(m rpcMessage) bool {
		return m.Method == "notifications/cancelled" && bytes.Equal(m.Params.RequestID, call.ID)
	})
}

// fifoTap makes a named pipe whose lines the tap records, for a server
// whose input runs through tee.
func fifoTap(t *testing.T) (string, *wireTap) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wire")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opened for reading and writing, the pipe never reports an end: the
	// tee of a restarted server goes on where the killed one stopped.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tap := newWireTap()
	go func() {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			tap.record(sc.Bytes())
		}
	}()
	return path, tap
}

// groupMembers lists the processes of a process group.
func groupMembers(t *testing.T, pgid int) []int { return livingProcesses(t, statPGRP, pgid) }

// childrenOf lists the processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int { return livingProcesses(t, statPPID, pid) }

// Fields of /proc/<pid>/stat counted after the command's closing ')'.
const (
	statPPID = 1
	statPGRP = 2
)

// livingProcesses lists the processes that are not zombies and whose stat
// field (statPPID or statPGRP) is value.
func livingProcesses(t *testing.T, field, value int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold anything, so read after its ')'.
		i := bytes.LastIndexByte(stat, ')')
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > field && fields[0] != "Z" && fields[field] == strconv.Itoa(value) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processWatch holds pidfds of processes, so that a test can wait for
// exactly those processes to end, whatever later reuses their IDs.
type processWatch map[int]int

func watchProcesses(t *testing.T, pids []int) processWatch {
	t.Helper()
	w := processWatch{}
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			t.Fatalf("pidfd of %d: %v", pid, err)
		}
		w[pid] = fd
		t.Cleanup(func() { unix.Close(fd) })
	}
	return w
}

// awaitExit waits until every watched process has ended.
func (w processWatch) awaitExit(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for pid, fd := range w {
		for {
			left := time.Until(deadline)
			if left <= 0 {
				t.Fatalf("process %d is still running", pid)
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(left.Milliseconds()))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
		}
	}
}

// catalogView follows the catalog, so that a test can wait for tools to appear.
func catalogView(t *testing.T, url string) *catalog.View {
	t.Helper()
	return testenv.Catalog(t, url).View
}

// awaitTool waits until the catalog holds a tool that match accepts.
func awaitTool(t *testing.T, v *catalog.View, what string, match func(*messages.ToolDefinition) bool) *messages.ToolDefinition {
	t.Helper()
	timeout := time.After(testenv.Patience)
	for {
		changed := v.Changed()
		for _, tool := range v.Tools() {
			if match(&tool.Definition) {
				return &tool.Definition
			}
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the catalog never showed %s", what)
		}
	}
}

// listNamespace lists a namespace through the coordinator once the
// coordinator's view of the catalog has caught up with the bucket, where a
// started worker has registered its tools.
func listNamespace(t *testing.T, c *client.Client, url, ns string) map[string]messages.ToolEntry {
	t.Helper()
	registered := 0
	for _, tool := range testenv.Catalog(t, url).View.Tools() {
		if tool.Definition.Namespace == ns {
			registered++
		}
	}
	out := map[string]messages.ToolEntry{}
	testenv.Eventually(t, "the coordinator to list namespace "+ns, func() bool {
		reply, err := c.ListTools(testenv.Context(t), messages.ListToolsRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		clear(out)
		for _, e := range reply.Tools {
			out[e.Name] = e
		}
		return len(out) == registered
	})
	return out
}

func textOf(res *messages.CallResult) string {
	var parts []string
	for _, b := range res.Content {
		if b.Type == messages.ContentText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// checkEverythingCatalog checks that the reference server's tools are in the catalog, with their annotations as tags.
func checkEverythingCatalog(t *testing.T, c *client.Client, url, source string) {
	t.Helper()
	tools := listNamespace(t, c, url, "everything")
	for _, name := range []string{"everything-get-sum", "everything-get-tiny-image", "everything-trigger-long-running-operation", "everything-echo"} {
		e, ok := tools[name]
		if !ok {
			t.Fatalf("catalog lacks %s; it has %d tools", name, len(tools))
		}
		if e.Source.Kind != messages.SourceMCP || e.Source.Name != source || !e.Available {
			t.Errorf("%s: source %+v available %v", name, e.Source, e.Available)
		}
	}
	sum := tools["everything-get-sum"]
	if !sum.Metadata.HasTag(messages.TagReadOnly) || !strings.Contains(string(sum.InputSchema), `"a"`) {
		t.Errorf("get-sum: tags %v, schema %s", sum.Metadata.Tags, sum.InputSchema)
	}
}

// checkSumAndImage calls get-sum and get-tiny-image through Toolbus.
func checkSumAndImage(t *testing.T, c *client.Client) {
	t.Helper()
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, "everything-get-sum", map[string]any{"a": 2, "b": 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateCompleted || res.IsError || textOf(res) != "The sum of 2 and 3 is 5." {
		t.Fatalf("get-sum: %s %v %q", res.Status, res.IsError, textOf(res))
	}
	res, err = c.Call(ctx, "everything-get-tiny-image", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var image *messages.ContentBlock
	for i, b := range res.Content {
		if b.Type == messages.ContentImage {
			image = &res.Content[i]
		}
	}
	if res.IsError || image == nil || image.MIMEType != "image/png" || !bytes.HasPrefix(image.Data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("get-tiny-image: %+v", res)
	}
}

// checkProgressAndCancel runs the long-running operation, follows its
// progress through Toolbus, cancels it half-way and waits until the server
// has taken the notifications/cancelled for its request.
func checkProgressAndCancel(t *testing.T, c *client.Client, tap *wireTap) {
	t.Helper()
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "everything-trigger-long-running-operation", Arguments: messages.JSON(`{"duration":60,"steps":40}`)})
	if err != nil {
		t.Fatal(err)
	}
	var progress []messages.Progress
	var result *messages.CallResult
	for ev, err := range c.Watch(ctx, r.CallID) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case messages.EventProgress:
			progress = append(progress, *ev.Progress)
			if len(progress) == 2 {
				if _, err := c.Cancel(ctx, r.CallID, "enough"); err != nil {
					t.Fatal(err)
				}
			}
		case messages.EventResult:
			result = ev.Result
		}
	}
	if result == nil || result.Status != messages.StateCancelled {
		t.Fatalf("result %+v, want cancelled", result)
	}
	if len(progress) < 2 || progress[0].Total != 40 || progress[1].Progress <= progress[0].Progress || progress[len(progress)-1].Progress >= 40 {
		t.Fatalf("progress %+v: want rising steps of 40 that stop before the end", progress)
	}
	// The cancellation, not the tool's end, ended the call: it ran less
	// than the tool's 60 s (the cancel is sent after two of its steps).
	if d := result.FinishedAt.Sub(result.StartedAt); d >= 60*time.Second {
		t.Fatalf("the call ran %v of its 60 s; the cancellation did not end it", d)
	}
	cancelled := tap.cancellationOf(t, "trigger-long-running-operation")
	if !strings.Contains(cancelled.Params.Reason, "enough") {
		t.Errorf("the server was told %q, not the caller's reason", cancelled.Params.Reason)
	}
	// The server handles its messages in order: once a later call is
	// answered, it has handled the cancellation. (Its long-running tool
	// ignores the abort signal; its SDK drops the cancelled request's answer.)
	checkSumAndImage(t, c)
}

func TestMCPSourceOverStdio(t *testing.T) {
	t.Parallel()
	server := everythingServer(t)
	wire, tap := fifoTap(t)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	// The shell leads the server's process group, with tee and the server
	// as its children: a process tree, as an npx launch would make, whose
	// input the test reads through the named pipe.
	src, err := mcp.New(mcp.Config{
		Name:      "everything",
		Namespace: "everything",
		Command:   "/bin/sh",
		Args:      []string{"-c", `tee -a "$0" | "$1" stdio`, wire, server},
		Logger:    testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := testenv.Worker(t, srv.URL(), worker.Config{ProgressInterval: time.Millisecond},
		worker.Namespace{Name: "everything", Sources: []worker.Source{src}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})

	checkEverythingCatalog(t, c, srv.URL(), "everything")
	checkSumAndImage(t, c)
	checkProgressAndCancel(t, c, tap)

	// A crash of the group's leader takes the whole group down, and the
	// worker starts one new server for the next call.
	first := src.PID()
	members := groupMembers(t, first)
	if len(members) != 3 {
		t.Fatalf("process group %d has %v; want the shell, tee and the server", first, members)
	}
	crashed := watchProcesses(t, members)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	crashed.awaitExit(t)
	checkSumAndImage(t, c)
	second := src.PID()
	if second == 0 || second == first {
		t.Fatalf("server PID %d after the crash of %d", second, first)
	}
	members = groupMembers(t, second)
	if len(members) != 3 {
		t.Fatalf("after the restart, process group %d has %v; want one shell, tee and server", second, members)
	}

	// Stopping the worker ends every process it started.
	running := watchProcesses(t, members)
	if err := w.Stop(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	running.awaitExit(t)
	if src.PID() != 0 {
		t.Errorf("the source still names server %d after Stop", src.PID())
	}
}

// startEverythingHTTP runs the reference server's streamable HTTP transport
// on a free port and returns its address.
func startEverythingHTTP(t *testing.T, server string) (*testenv.Process, string) {
	t.Helper()
	port := testenv.FreePort(t)
	p := testenv.Start(t, "/usr/bin/env", "PORT="+strconv.Itoa(port), server, "streamableHttp")
	p.WaitLine(t, "listening on port "+strconv.Itoa(port))
	return p, "http://127.0.0.1:" + strconv.Itoa(port)
}

// tappingProxy forwards to a server that the test can replace, recording
// the JSON-RPC messages posted to it.
type tappingProxy struct {
	tap    *wireTap
	mu     sync.Mutex
	target *url.URL
}

func newTappingProxy(t *testing.T, target string) (*tappingProxy, string) {
	t.Helper()
	p := &tappingProxy{tap: newWireTap()}
	p.setTarget(t, target)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			p.mu.Lock()
			r.SetURL(p.target)
			p.mu.Unlock()
		},
		FlushInterval: -1,
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			rp.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var probe struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(body, &probe) == nil && len(probe.ID) > 0 {
			// A request: its answer may stream for long.
			p.tap.record(body)
			rp.ServeHTTP(w, r)
			return
		}
		// A notification counts as seen once the server accepted it.
		sw := &statusWriter{ResponseWriter: w}
		rp.ServeHTTP(sw, r)
		if sw.status >= 200 && sw.status < 300 {
			p.tap.record(body)
		}
	})
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return p, s.URL
}

// statusWriter remembers the status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets the proxy flush server-sent events through.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (p *tappingProxy) setTarget(t *testing.T, target string) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.target = u
	p.mu.Unlock()
}

func TestMCPSourceOverStreamableHTTP(t *testing.T) {
	t.Parallel()
	server := everythingServer(t)
	first, addr := startEverythingHTTP(t, server)
	proxy, proxyURL := newTappingProxy(t, addr)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	src, err := mcp.New(mcp.Config{
		Name:       "remote",
		Namespace:  "everything",
		Transport:  mcp.TransportHTTP,
		URL:        proxyURL + "/mcp",
		Headers:    map[string]string{"X-Toolbus-Test": "yes"},
		MaxBackoff: time.Second,
		Logger:     testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Worker(t, srv.URL(), worker.Config{ProgressInterval: time.Millisecond},
		worker.Namespace{Name: "everything", Sources: []worker.Source{src}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})

	checkEverythingCatalog(t, c, srv.URL(), "remote")
	checkSumAndImage(t, c)
	checkProgressAndCancel(t, c, proxy.tap)

	// The server dies and another takes its place: its session is gone,
	// the worker reconnects, and the call is delivered again until it works.
	first.Kill()
	_ = first.Wait(testenv.Context(t))
	_, addr = startEverythingHTTP(t, server)
	proxy.setTarget(t, addr)
	res, err := c.Call(testenv.Context(t), "everything-get-sum", map[string]any{"a": 40, "b": 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || textOf(res) != "The sum of 40 and 2 is 42." {
		t.Fatalf("get-sum after the server's restart: %+v", res)
	}
}

func TestMCPSourceNamesAndListChanges(t *testing.T) {
	t.Parallel()
	long := "an.extremely/long tool name that no model provider would accept as it is, really.v2"
	originals := []string{"files.read", "files/read", "search web", long}
	received := make(chan string, 10)
	echo := func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		received <- req.Params.Name
		return mcpgo.NewToolResultText("called " + req.Params.Name), nil
	}
	mcpSrv := mcpserver.NewMCPServer("names", "1", mcpserver.WithToolCapabilities(true), mcpserver.WithPaginationLimit(2))
	for _, name := range originals {
		mcpSrv.AddTool(mcpgo.NewTool(name, mcpgo.WithDescription("Returns its own name."), mcpgo.WithString("path")), echo)
	}
	httpSrv := httptest.NewServer(mcpserver.NewStreamableHTTPServer(mcpSrv))
	t.Cleanup(httpSrv.Close)

	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	src, err := mcp.New(mcp.Config{Name: "names", Namespace: "odd", URL: httpSrv.URL + "/mcp", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	view := catalogView(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "odd", Sources: []worker.Source{src}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})

	tools := listNamespace(t, c, srv.URL(), "odd")
	if len(tools) != len(originals) {
		t.Fatalf("catalog has %d tools of the server's %d (pages of 2)", len(tools), len(originals))
	}
	byOriginal := map[string]messages.ToolEntry{}
	for _, e := range tools {
		byOriginal[e.OriginalName] = e
	}
	for _, original := range originals {
		e, ok := byOriginal[original]
		if !ok {
			t.Fatalf("no tool keeps the original name %q: %v", original, tools)
		}
		if err := e.ToolName().Validate(); err != nil || strings.ContainsAny(e.Method, "./ ") {
			t.Fatalf("%q is served as %q: %v", original, e.Name, err)
		}
		res, err := c.Call(testenv.Context(t), e.Name, map[string]any{"path": "x"})
		if err != nil {
			t.Fatal(err)
		}
		if got := receive(t, received, "the server's call"); got != original {
			t.Fatalf("calling %s reached the server as %q, want %q", e.Name, got, original)
		}
		if res.IsError || textOf(res) != "called "+original {
			t.Fatalf("%s: %+v", e.Name, res)
		}
	}

	// A tool added on the server reaches the catalog through notifications/tools/list_changed.
	mcpSrv.AddTool(mcpgo.NewTool("late.arrival", mcpgo.WithDescription("Added later.")), echo)
	late := awaitTool(t, view, "the tool added later", func(d *messages.ToolDefinition) bool { return d.OriginalName == "late.arrival" })
	res, err := c.Call(testenv.Context(t), late.Name, map[string]any{})
	if err != nil || res.IsError || receive(t, received, "the late tool's call") != "late.arrival" {
		t.Fatalf("late tool %s: %+v %v", late.Name, res, err)
	}
}

// apiRequest is what the test API saw of one request.
type apiRequest struct {
	Method, Path, RawPath, Query string
	Header                       http.Header
	Body                         string
}

// testAPI is the HTTP service behind the OpenAPI source: it records every
// request and answers per path.
func testAPI(t *testing.T) (*httptest.Server, chan apiRequest, chan error) {
	t.Helper()
	spec, err := os.ReadFile(filepath.Join("testdata", "items.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	requests := make(chan apiRequest, 100)
	aborted := make(chan error, 10)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(spec)
	})
	record := func(r *http.Request) apiRequest {
		body, _ := io.ReadAll(r.Body)
		req := apiRequest{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(body)}
		requests <- req
		return req
	}
	mux.HandleFunc("/api/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		req := record(r)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "tags": r.URL.Query()["tags"], "trace": r.Header.Get("X-Trace"), "body": req.Body})
	})
	mux.HandleFunc("/api/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		code, _ := strconv.Atoi(r.PathValue("code"))
		if code == 404 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			w.Write([]byte(`{"error":"no such thing"}`))
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d, as asked", code)
	})
	mux.HandleFunc("/api/search", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("found nothing"))
	})
	mux.HandleFunc("/api/slow", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		<-r.Context().Done()
		aborted <- r.Context().Err()
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s, requests, aborted
}

func TestOpenAPISource(t *testing.T) {
	t.Parallel()
	api, requests, aborted := testAPI(t)
	tokenEnv := "TOOLBUS_TEST_ITEMS_TOKEN_" + strconv.Itoa(os.Getpid())
	os.Setenv(tokenEnv, "s3cret")
	t.Cleanup(func() { os.Unsetenv(tokenEnv) })

	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	fromFile, err := openapi.New(openapi.Config{Name: "items", Namespace: "items", Spec: filepath.Join("testdata", "items.yaml"), BaseURL: api.URL + "/api", Auth: openapi.Auth{BearerEnv: tokenEnv}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The same document read from a URL: its relative server URL is resolved against it.
	fromURL, err := openapi.New(openapi.Config{Name: "items", Namespace: "items_url", Spec: api.URL + "/openapi.yaml", Auth: openapi.Auth{APIKeyEnv: tokenEnv, Query: "key"}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Worker(t, srv.URL(), worker.Config{},
		worker.Namespace{Name: "items", Sources: []worker.Source{fromFile}},
		worker.Namespace{Name: "items_url", Sources: []worker.Source{fromURL}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)

	tools := listNamespace(t, c, srv.URL(), "items")
	byOriginal := map[string]messages.ToolEntry{}
	for _, e := range tools {
		byOriginal[cmp.Or(e.OriginalName, e.Method)] = e
	}
	get, update, status := byOriginal["items.get/v2"], byOriginal["updateItem"], byOriginal["GET /status/{code}"]
	if get.Name == "" || update.Name != "items-updateItem" || status.Name != "items-get_status_code" {
		t.Fatalf("tools %v", tools)
	}
	if !get.Metadata.HasTag(messages.TagReadOnly) || !get.Metadata.HasTag(messages.TagNetwork) || get.Source.Kind != messages.SourceOpenAPI {
		t.Errorf("get: tags %v source %+v", get.Metadata.Tags, get.Source)
	}
	if del := byOriginal["deleteItem"]; !del.Metadata.HasTag(messages.TagDestructive) {
		t.Errorf("deleteItem tags %v", del.Metadata.Tags)
	}
	var schema struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Minimum     *int   `json:"minimum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(update.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	bodyID, pathID := schema.Properties["body_id"], schema.Properties["id"]
	if !strings.Contains(bodyID.Description, `body property "id"`) || !strings.Contains(pathID.Description, "The item's ID") ||
		schema.Properties["count"].Minimum == nil || !slices.Contains(schema.Required, "id") || !slices.Contains(schema.Required, "name") {
		t.Fatalf("updateItem input schema %s", update.InputSchema)
	}

	// Path (escaped), query array, header and bearer token.
	res, err := c.Call(ctx, get.Name, map[string]any{"id": "a b/c", "tags": []string{"x", "y&z"}, "X-Trace": "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	req := receive(t, requests, "the GET")
	if req.Method != "GET" || req.Path != "/api/items/a b/c" || req.RawPath != "/api/items/a%20b%2Fc" || req.Query != "tags=x&tags=y%26z" ||
		req.Header.Get("X-Trace") != "t-1" || req.Header.Get("Authorization") != "Bearer s3cret" {
		t.Fatalf("the API got %+v", req)
	}
	var item struct {
		ID    string   `json:"id"`
		Tags  []string `json:"tags"`
		Trace string   `json:"trace"`
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].Type != messages.ContentJSON || json.Unmarshal(res.StructuredContent, &item) != nil ||
		item.ID != "a b/c" || !slices.Equal(item.Tags, []string{"x", "y&z"}) || item.Trace != "t-1" {
		t.Fatalf("result %+v", res)
	}

	// A JSON body beside a path parameter of the same name.
	if _, err := c.Call(ctx, update.Name, map[string]any{"id": "7", "body_id": "8", "name": "new", "count": 2}); err != nil {
		t.Fatal(err)
	}
	req = receive(t, requests, "the POST")
	var body map[string]any
	if err := json.Unmarshal([]byte(req.Body), &body); err != nil || req.Method != "POST" || req.Path != "/api/items/7" ||
		body["id"] != "8" || body["name"] != "new" || body["count"] != 2.0 || req.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("the API got %+v (%v)", req, err)
	}

	// Query styles: an unexploded form array and a deep object.
	if _, err := c.Call(ctx, "items-search", map[string]any{"ids": []int{1, 2}, "filter": map[string]any{"color": "red"}}); err != nil {
		t.Fatal(err)
	}
	if req = receive(t, requests, "the search"); req.Query != "ids=1,2&filter%5Bcolor%5D=red" {
		t.Fatalf("search query %q", req.Query)
	}

	// Error statuses are the tool's errors, carrying status and body.
	for _, tc := range []struct {
		code int
		text string
	}{{404, `HTTP 404 Not Found: {"error":"no such thing"}`}, {503, "HTTP 503 Service Unavailable: status 503, as asked"}} {
		res, err := c.Call(ctx, status.Name, map[string]any{"code": tc.code})
		if err != nil {
			t.Fatal(err)
		}
		receive(t, requests, "the status request")
		var structured struct {
			Status int `json:"status"`
		}
		_ = json.Unmarshal(res.StructuredContent, &structured)
		if res.Status != messages.StateCompleted || !res.IsError || textOf(res) != tc.text || structured.Status != tc.code || res.Error.Code != messages.ResultToolError {
			t.Fatalf("status %d: %+v", tc.code, res)
		}
	}

	// The call's deadline aborts the request, which the API holds until
	// then. The deadline leaves the worker time to send the request first
	// on a busy machine.
	res, err = c.Call(ctx, "items-slow", map[string]any{}, client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	receive(t, requests, "the slow request")
	if res.Status != messages.StateTimedOut {
		t.Fatalf("slow: %+v", res)
	}
	if err := receive(t, aborted, "the end of the slow request"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the slow request ended with %v", err)
	}

	// From the URL: base URL from the document, API key in the query.
	if _, err := c.Call(ctx, "items_url-search", map[string]any{"ids": []int{3}}); err != nil {
		t.Fatal(err)
	}
	if req = receive(t, requests, "the search through the URL spec"); req.Path != "/api/search" || req.Query != "ids=3&key=s3cret" {
		t.Fatalf("the API got %+v", req)
	}
}

func TestOpenAPISourceRejectsBrokenSpec(t *testing.T) {
	t.Parallel()
	src, err := openapi.New(openapi.Config{Name: "broken", Spec: filepath.Join("testdata", "broken-ref.yaml"), BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.Start(testenv.Context(t), nil)
	if err == nil || !strings.Contains(err.Error(), "broken-ref.yaml") || !strings.Contains(err.Error(), "#/components/schemas/Missing") {
		t.Fatalf("Start of a spec with a broken $ref: %v", err)
	}

	// The worker does not start with it either.
	srv := testenv.Server(t)
	w, err := worker.New(worker.Config{Conn: testenv.Connect(t, srv.URL()), Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	src, _ = openapi.New(openapi.Config{Name: "broken", Spec: filepath.Join("testdata", "broken-ref.yaml"), BaseURL: "http://127.0.0.1:1"})
	if err := w.Serve(worker.Namespace{Name: "broken", Sources: []worker.Source{src}}); err != nil {
		t.Fatal(err)
	}
	err = w.Start(testenv.Context(t))
	if err == nil || !strings.Contains(err.Error(), "#/components/schemas/Missing") {
		t.Fatalf("worker Start: %v", err)
	}
}

// TestWorkerConfigFile runs the worker command on a configuration file
// with an MCP server and the demo tools, and stops it.
func TestWorkerConfigFile(t *testing.T) {
	t.Parallel()
	server := everythingServer(t)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	config := filepath.Join(t.TempDir(), "worker.yaml")
	err := os.WriteFile(config, []byte(`
namespaces:
  - name: everything
    slots: 4
    sources:
      - mcp:
          name: everything
          command: `+strconv.Quote(server)+`
          args: [stdio]
  - name: demo
    sources:
      - demo: true
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	bin := testenv.Binary(t, "./cmd/worker")
	w := testenv.Start(t, bin, "--server", srv.URL(), "--config", config, "--id", "configured")
	w.WaitLine(t, "worker configured ready")
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)
	for tool, args := range map[string]any{"everything-get-sum": map[string]any{"a": 1, "b": 2}, "demo-echo": map[string]any{"text": "hi"}} {
		res, err := c.Call(ctx, tool, args)
		if err != nil || res.IsError {
			t.Fatalf("%s: %+v %v", tool, res, err)
		}
	}
	servers := childrenOf(t, w.Cmd.Process.Pid)
	if len(servers) != 1 {
		t.Fatalf("the worker runs %v; want one MCP server", servers)
	}
	running := watchProcesses(t, groupMembers(t, servers[0]))
	if err := w.Interrupt(t); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
	running.awaitExit(t)

	// A mistake in the file stops the command before it connects anywhere.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("namespaces:\n  - name: x\n    sources:\n      - mcp: {name: s, transport: http}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--server", "nats://127.0.0.1:1", "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bad.yaml:4: namespaces[0].sources[0].mcp.url: the http transport needs a url") {
		t.Fatalf("bad file: %v\n%s", err, out)
	}
}
