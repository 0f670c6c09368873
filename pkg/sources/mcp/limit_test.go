package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// fakeServerArg makes the test binary a hand-written MCP server over stdio
// that misbehaves as $FAKE_MCP_MODE says: "silent" never answers
// initialize, "huge-list" lists a tool whose description is larger than a
// message may be, "endless-pages" lists pages of tools without end, and
// "huge-result" answers a call of its tool big with such a text (and one
// of small with the server's process ID); "polite" ends at the end of its
// input, "deaf" does not take the end of its input as the end, and
// "stubborn" ignores SIGTERM too. Each writes what it saw, one line per
// event, to the file $FAKE_MCP_MARK names.
const fakeServerArg = "serve-fake-mcp-server"

func serveFake(mode string) {
	mark := func(event string) {
		if name := os.Getenv("FAKE_MCP_MARK"); name != "" {
			f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			if err == nil {
				f.WriteString(event + "\n")
				f.Close()
			}
		}
	}
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	go func() {
		<-terms
		if mode == "stubborn" {
			mark("SIGTERM ignored")
			return
		}
		mark("SIGTERM")
		os.Exit(0)
	}()
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	answer := func(id json.RawMessage, result any) {
		data, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
		out.Write(data)
		out.WriteByte('\n')
		out.Flush()
	}
	huge := strings.Repeat("x", maxMessageSize)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			mark("end of input")
			if mode == "stubborn" || mode == "deaf" {
				select {} // waits for a signal that ends it
			}
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string          `json:"protocolVersion"`
				Cursor          string          `json:"cursor"`
				Capabilities    json.RawMessage `json:"capabilities"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &req) != nil || req.ID == nil {
			continue
		}
		switch req.Method {
		case "initialize":
			if mode == "silent" {
				continue
			}
			if path := os.Getenv("FAKE_MCP_CAPABILITIES"); path != "" {
				os.WriteFile(path, req.Params.Capabilities, 0o600)
			}
			answer(req.ID, map[string]any{"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "fake", "version": "1"}})
		case "tools/list":
			switch mode {
			case "huge-list":
				// Written as it is: encoding 32 MiB takes seconds under the race detector.
				fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"big","description":"%s","inputSchema":{"type":"object"}}]}}`+"\n", req.ID, huge)
				out.Flush()
			case "endless-pages":
				page := len(req.Params.Cursor)
				tools := make([]any, 1000)
				for i := range tools {
					tools[i] = map[string]any{"name": fmt.Sprintf("t%d_%d", page, i), "inputSchema": map[string]any{"type": "object"}}
				}
				answer(req.ID, map[string]any{"tools": tools, "nextCursor": req.Params.Cursor + "x"})
			default:
				answer(req.ID, map[string]any{"tools": []any{
					map[string]any{"name": "big", "inputSchema": map[string]any{"type": "object"}},
					map[string]any{"name": "small", "inputSchema": map[string]any{"type": "object"}},
				}})
			}
		case "tools/call":
			var call struct {
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			json.Unmarshal(line, &call)
			if call.Params.Name == "big" {
				// The ID last, as the TypeScript SDK writes responses;
				// written as it is, as the huge list is.
				fmt.Fprintf(out, `{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"%s"}]},"id":%s}`+"\n", huge, req.ID)
				out.Flush()
				continue
			}
			answer(req.ID, map[string]any{"content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("small from process %d", os.Getpid())}}})
		default:
			answer(req.ID, map[string]any{})
		}
	}
}

func fakeServer(t *testing.T, mode string) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{Name: "fake", Namespace: "fake", Command: exe, Args: []string{fakeServerArg}, Env: []string{"FAKE_MCP_MODE=" + mode},
		Logger: testenv.Logger(t), MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
}

// startFake starts a source on the fake server. Its ConnectTimeout of
// ten minutes is never what ends a test that does not set its own: the
// errors the tests expect name the limit that ended Start.
func startFake(t *testing.T, cfg Config) ([]worker.Tool, *Source, error) {
	t.Helper()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Minute
	}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := src.Start(context.Background(), func([]worker.Tool) {})
	if err == nil {
		t.Cleanup(func() { src.Stop(context.Background()) })
	}
	return tools, src, err
}

func TestServerThatNeverAnswersInitialize(t *testing.T) {
	t.Parallel()
	cfg := fakeServer(t, "silent")
	cfg.ConnectTimeout = 300 * time.Millisecond
	_, _, err := startFake(t, cfg)
	if err == nil || !strings.Contains(err.Error(), "mcp: server fake: initialize:") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start: %v", err)
	}
}

func TestToolListLargerThanAMessageFailsStart(t *testing.T) {
	t.Parallel()
	_, _, err := startFake(t, fakeServer(t, "huge-list"))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("list tools: the server sent a message larger than %d bytes", maxMessageSize)) {
		t.Fatalf("Start: %v", err)
	}
}

func TestEndlessToolListFailsStart(t *testing.T) {
	t.Parallel()
	_, _, err := startFake(t, fakeServer(t, "endless-pages"))
	if err == nil || !strings.Contains(err.Error(), "list tools: the server lists more than 10000 tools") {
		t.Fatalf("Start: %v", err)
	}
}

// TestResultLargerThanAMessage: through a worker, a call whose result is
// too large to read ends at its first attempt, completed with a tool error
// that names the bound; the server's process is not restarted, and
// answers the next call.
//
// Not parallel, nor is TestHTTPResultLargerThanAMessage: each moves
// messages of 32 MiB, which take seconds of both cores under the race
// detector, and the parallel tests that bound how long a start may take
// then run after them rather than beside them.
func TestResultLargerThanAMessage(t *testing.T) {
	src, err := New(fakeServer(t, "huge-result"))
	if err != nil {
		t.Fatal(err)
	}
	nats := testenv.Server(t)
	testenv.Coordinator(t, nats.URL())
	testenv.Worker(t, nats.URL(), worker.Config{}, worker.Namespace{Name: "fake", Sources: []worker.Source{src}})
	c := testenv.Client(t, nats.URL(), client.Options{Agent: "tester"})
	ctx := testenv.Context(t)
	before, err := c.Call(ctx, "fake-small", map[string]any{})
	if err != nil || before.IsError || len(before.Content) != 1 {
		t.Fatalf("fake-small: %+v %v", before, err)
	}
	res, err := c.Call(ctx, "fake-big", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	const want = "MCP server fake: the result of tool big is larger than 33554432 bytes (32 MiB), the most one message from an MCP server may hold; it was not read"
	if res.Status != messages.StateCompleted || !res.IsError || res.Error == nil || res.Error.Code != messages.ResultToolError || res.Attempt != 1 ||
		res.Error.Message != want || len(res.Content) != 1 || res.Content[0].Text != want {
		t.Fatalf("result %+v (error %+v), want a tool error naming the bound at attempt 1", res, res.Error)
	}
	after, err := c.Call(ctx, "fake-small", map[string]any{})
	if err != nil || after.IsError || len(after.Content) != 1 || after.Content[0].Text != before.Content[0].Text {
		t.Fatalf("fake-small after it: %+v %v; before it: %q (the same process must answer)", after, err, before.Content[0].Text)
	}
}

// TestHTTPResultLargerThanAMessage: a streamable HTTP server that answers
// a call with a result too large to read, in a JSON body or in an SSE
// event, fails that call with an error naming the bound, and the session
// goes on: the next call is answered without a new initialize.
func TestHTTPResultLargerThanAMessage(t *testing.T) {
	huge := strings.Repeat("x", maxMessageSize)
	for _, contentType := range []string{"application/json", "text/event-stream"} {
		var initialized atomic.Int32
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					ProtocolVersion string `json:"protocolVersion"`
					Name            string `json:"name"`
				} `json:"params"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			if req.ID == nil {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			var result any = map[string]any{}
			switch req.Method {
			case "initialize":
				initialized.Add(1)
				result = map[string]any{"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "big", "version": "1"}}
			case "tools/list":
				result = map[string]any{"tools": []any{map[string]any{"name": "big", "inputSchema": map[string]any{"type": "object"}}, map[string]any{"name": "small", "inputSchema": map[string]any{"type": "object"}}}}
			case "tools/call":
				text := "small"
				if req.Params.Name == "big" {
					text = huge
				}
				result = json.RawMessage(`{"content":[{"type":"text","text":"` + text + `"}]}`) // encoding 32 MiB takes seconds under the race detector
			}
			data, ok := result.(json.RawMessage)
			if !ok {
				data, _ = json.Marshal(result)
			}
			message := `{"jsonrpc":"2.0","result":` + string(data) + `,"id":` + string(req.ID) + `}`
			w.Header().Set("Content-Type", contentType)
			if contentType == "text/event-stream" {
				message = "event: message\ndata: " + message + "\n\n"
			}
			io.WriteString(w, message)
		}))
		t.Cleanup(ts.Close)
		src, err := New(Config{Name: "big", Namespace: "big", URL: ts.URL + "/mcp", Logger: testenv.Logger(t), MinBackoff: time.Hour, MaxBackoff: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		tools, err := src.Start(context.Background(), func([]worker.Tool) {})
		if err != nil || len(tools) != 2 {
			t.Fatalf("%s: Start: %v %v", contentType, tools, err)
		}
		t.Cleanup(func() { src.Stop(context.Background()) })
		byMethod := map[string]worker.Tool{}
		for _, tool := range tools {
			byMethod[tool.Definition.Method] = tool
		}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
		defer cancel()
		_, err = byMethod["big"].Handler.Handle(ctx, &worker.Call{ID: "c1", Arguments: []byte(`{}`), Attempt: 1})
		if err == nil || errors.Is(err, worker.ErrRetry) || !strings.Contains(err.Error(), "the result of tool big is larger than 33554432 bytes") {
			t.Fatalf("%s: the too large result: %v, want the call's failure naming the bound", contentType, err)
		}
		res, err := byMethod["small"].Handler.Handle(ctx, &worker.Call{ID: "c2", Arguments: []byte(`{}`), Attempt: 1})
		if err != nil || res.Content[0].Text != "small" || initialized.Load() != 1 || src.Unavailable() != "" {
			t.Fatalf("%s: a call after the large result: %+v %v, %d initialize requests, unavailable %q", contentType, res, err, initialized.Load(), src.Unavailable())
		}
	}
}

// TestMessageLimitSkipsAMessage: a message over the limit in a stream is
// cut and skipped, in one read or a byte at a time: a response becomes an
// error response to its request, whose ID is told; a notification is
// dropped; a response without an ID ends the session. The messages around
// it pass unchanged. A body over the limit fails the read.
func TestMessageLimitSkipsAMessage(t *testing.T) {
	long := strings.Repeat("x", 80)
	standIn := `{"error":{"code":-32000,"message":"the server sent a message larger than 33554432 bytes"},"id":"a\"b","jsonrpc":"2.0"}`
	for _, tc := range []struct {
		name     string
		framing  framing
		stream   string
		want     string // what passes, with CUT for the cut message's part
		told     string
		tooLarge bool
	}{
		{"a response over stdio", perLine,
			`{"id":1}` + "\n" + `{"jsonrpc":"2.0","result":{"t":"` + long + `"},"id":"a\"b"}` + "\n" + `{"id":2}` + "\n",
			`{"id":1}` + "\nCUT\n" + standIn + "\n" + `{"id":2}` + "\n", `"a\"b"`, false},
		{"a notification over stdio", perLine,
			`{"method":"notifications/progress","params":{"m":"` + long + `"}}` + "\n" + `{"id":2}` + "\n",
			"CUT\n" + `{"id":2}` + "\n", "", false},
		{"a response without an ID over stdio", perLine,
			`{"result":"` + long + `"}` + "\n" + `{"id":2}` + "\n",
			"CUT\n" + `{"id":2}` + "\n", "", true},
		{"a response in an event of several data lines", perEvent,
			"data: {\"id\":1}\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"result\":\"" + long + "\",\ndata:\"id\":\"a\\\"b\"}\n\ndata: {\"id\":2}\n\n",
			"data: {\"id\":1}\n\nCUT\nevent: toolbus-skipped\n\nevent: message\ndata: " + standIn + "\n\ndata: {\"id\":2}\n\n", `"a\"b"`, false},
	} {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tc.stream)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			var told []string
			var ended error
			m := &messageLimit{r: r, framing: tc.framing, limit: 40, tooLarge: func(err error) { ended = err }, skipped: func(id string) { told = append(told, id) }}
			got, err := io.ReadAll(m)
			if err != nil {
				t.Fatalf("%s (one byte at a time: %v): %v", tc.name, oneByte, err)
			}
			before, after, found := strings.Cut(tc.want, "CUT")
			cut := strings.TrimPrefix(string(got), before)
			if !found || !strings.HasPrefix(string(got), before) || !strings.HasSuffix(cut, after) || len(cut)-len(after) != 40 || !strings.HasPrefix(tc.stream, before+cut[:40]) {
				t.Errorf("%s (one byte at a time: %v): passed\n%q\nwant\n%q with CUT the first 40 bytes of the message", tc.name, oneByte, got, tc.want)
			}
			if tc.told != "" && (len(told) != 1 || told[0] != tc.told) || tc.told == "" && len(told) > 0 {
				t.Errorf("%s (one byte at a time: %v): told %q, want %q", tc.name, oneByte, told, tc.told)
			}
			if tc.tooLarge != errors.Is(ended, errMessageTooLarge) {
				t.Errorf("%s (one byte at a time: %v): the session ended: %v, want %v", tc.name, oneByte, ended, tc.tooLarge)
			}
		}
	}
	_, err := io.ReadAll(&messageLimit{r: strings.NewReader("1\n2\n3\n4\n5\n6\n7\n8\n"), framing: perBody, limit: 12})
	if !errors.Is(err, errMessageTooLarge) {
		t.Fatalf("a body of many lines: %v", err)
	}
}

// TestDeclaredCapabilities: the worker declares no client capabilities but
// roots, and roots only when the source lists some.
func TestDeclaredCapabilities(t *testing.T) {
	t.Parallel()
	for _, roots := range [][]string{nil, {t.TempDir()}} {
		cfg := fakeServer(t, "")
		record := filepath.Join(t.TempDir(), "capabilities")
		cfg.Env = append(cfg.Env, "FAKE_MCP_CAPABILITIES="+record)
		cfg.Roots = roots
		if _, _, err := startFake(t, cfg); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(record)
		if err != nil {
			t.Fatal(err)
		}
		var declared map[string]json.RawMessage
		if err := json.Unmarshal(data, &declared); err != nil {
			t.Fatalf("capabilities %s: %v", data, err)
		}
		_, hasRoots := declared["roots"]
		delete(declared, "roots")
		if hasRoots != (len(roots) > 0) || len(declared) > 0 {
			t.Errorf("with roots %v the worker declared %s", roots, data)
		}
	}
}

// TestLimitBodyFraming: an SSE stream is bounded per event, any other
// body as a whole.
func TestLimitBodyFraming(t *testing.T) {
	for contentType, want := range map[string]framing{
		"text/event-stream":                perEvent,
		"text/event-stream; charset=utf-8": perEvent,
		"application/json":                 perBody,
		"":                                 perBody,
	} {
		resp := &http.Response{Header: http.Header{"Content-Type": {contentType}}, Body: io.NopCloser(strings.NewReader(""))}
		limitBody(resp, nil, nil)
		body, ok := resp.Body.(struct {
			io.Reader
			io.Closer
		})
		if !ok {
			t.Fatalf("%q: body %T", contentType, resp.Body)
		}
		if m, ok := body.Reader.(*messageLimit); !ok || m.framing != want || m.limit != maxMessageSize {
			t.Errorf("%q: reader %+v, want framing %v", contentType, body.Reader, want)
		}
	}
}

// TestHTTPToolListLargerThanAMessage: a streamable HTTP server whose tool
// list is larger than a message may be is reported down with that reason,
// rather than read into memory however large.
func TestHTTPToolListLargerThanAMessage(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", maxMessageSize)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result any = map[string]any{}
		switch req.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "big", "version": "1"}}
		case "tools/list":
			// Written as it is: encoding 32 MiB takes seconds under the race detector.
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"big","description":"%s","inputSchema":{"type":"object"}}]}}`, req.ID, huge)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	}))
	t.Cleanup(ts.Close)
	src, err := New(Config{Name: "big", Namespace: "big", URL: ts.URL + "/mcp", Logger: testenv.Logger(t), MinBackoff: time.Hour, MaxBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := src.Start(context.Background(), func([]worker.Tool) {})
	if err != nil || len(tools) != 0 {
		t.Fatalf("Start: %v %v", tools, err)
	}
	t.Cleanup(func() { src.Stop(context.Background()) })
	if reason := src.Unavailable(); !strings.Contains(reason, fmt.Sprintf("list tools: the server sent a message larger than %d bytes", maxMessageSize)) {
		t.Fatalf("unavailable: %q", reason)
	}
}

// TestAMissingWorkingDirectoryIsNamed: a stdio server whose dir does not
// exist fails its start with an error that names the directory, not the
// command, which exists.
func TestAMissingWorkingDirectoryIsNamed(t *testing.T) {
	t.Parallel()
	cfg := fakeServer(t, "silent")
	cfg.Dir = filepath.Join(t.TempDir(), "nosuchdir")
	_, _, err := startFake(t, cfg)
	if err == nil || !strings.Contains(err.Error(), "its directory "+cfg.Dir) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Start with a missing dir: %v", err)
	}
}
