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
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/worker"
)

// fakeServerArg makes the test binary a hand-written MCP server over stdio
// that misbehaves as $FAKE_MCP_MODE says: "silent" never answers
// initialize, "huge-list" lists a tool whose description is larger than a
// message may be, "endless-pages" lists pages of tools without end, and
// "huge-result" answers its tool's call with such a text; "deaf" does not
// take the end of its input as the end, and "stubborn" ignores SIGTERM too.
const fakeServerArg = "serve-fake-mcp-server"

func serveFake(mode string) {
	if mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
	}
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
			if mark := os.Getenv("FAKE_MCP_MARK"); mark != "" {
				os.WriteFile(mark, []byte("end of input"), 0o600)
			}
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
				answer(req.ID, map[string]any{"tools": []any{map[string]any{"name": "big", "description": huge, "inputSchema": map[string]any{"type": "object"}}}})
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
			text := "small"
			if call.Params.Name == "big" {
				text = huge
			}
			answer(req.ID, map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}})
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

// startFake starts a source on the fake server and requires Start to end
// within a bound far below the test's ConnectTimeout of a minute: the
// limits under test, not the timeout, end it.
func startFake(t *testing.T, cfg Config) ([]worker.Tool, *Source, error) {
	t.Helper()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = time.Minute
	}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	tools, err := src.Start(context.Background(), func([]worker.Tool) {})
	if d := time.Since(began); d > 30*time.Second {
		t.Fatalf("Start took %v", d)
	}
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

// TestResultLargerThanAMessage: a result too large to read ends the
// session, the call is handed back for another attempt, and the server,
// started again, still serves other calls.
func TestResultLargerThanAMessage(t *testing.T) {
	t.Parallel()
	tools, _, err := startFake(t, fakeServer(t, "huge-result"))
	if err != nil {
		t.Fatal(err)
	}
	byMethod := map[string]worker.Tool{}
	for _, tool := range tools {
		byMethod[tool.Definition.Method] = tool
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = byMethod["big"].Handler.Handle(ctx, &worker.Call{ID: "c1", Arguments: []byte(`{}`), Attempt: 1})
	if !errors.Is(err, worker.ErrRetry) {
		t.Fatalf("the too large result: %v, want a retry", err)
	}
	res, err := byMethod["small"].Handler.Handle(ctx, &worker.Call{ID: "c2", Arguments: []byte(`{}`), Attempt: 1})
	if err != nil || res.Content[0].Text != "small" {
		t.Fatalf("a call after the server's restart: %+v %v", res, err)
	}
}

func TestMessageLimitFraming(t *testing.T) {
	for _, tc := range []struct {
		name    string
		framing framing
		stream  string
		fails   bool
	}{
		{"lines within", perLine, "12345\n12345\n12345\n", false},
		{"a long line", perLine, "12345\n1234567890123\n", true},
		{"events within", perEvent, "data: 1\n\ndata: 2\n\n", false},
		{"an event of many short lines", perEvent, "data: 1\ndata: 2\ndata: 3\n\n", true},
		{"a body of many lines", perBody, "1\n2\n3\n4\n5\n6\n7\n8\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var told error
			_, err := io.ReadAll(&messageLimit{r: strings.NewReader(tc.stream), framing: tc.framing, limit: 12, tooLarge: func(err error) { told = err }})
			if tc.fails != errors.Is(err, errMessageTooLarge) || tc.fails != (told != nil) {
				t.Fatalf("read: %v, told %v", err, told)
			}
		})
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
		limitBody(resp, nil)
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
			result = map[string]any{"tools": []any{map[string]any{"name": "big", "description": huge, "inputSchema": map[string]any{"type": "object"}}}}
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
