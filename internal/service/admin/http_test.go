package admin_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/admin"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

const testToken = "operator-token-0123456789"

// hostileDescription is a tool description that would run script if a
// page wrote it unescaped.
const hostileDescription = `<script>document.title="owned"</script><img src=x onerror=alert(1)>`

// pngPixel is a PNG image of one pixel.
var pngPixel = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

// testBundle is a console on a real bus: a NATS server, a coordinator, a
// worker of the demo tools and of a namespace whose tool says hostile
// things, and the console behind an httptest server.
type testBundle struct {
	url    string
	client *client.Client
	server *httptest.Server
}

func setup(t *testing.T, mutate ...func(*admin.Config)) *testBundle {
	t.Helper()
	srv := testenv.Server(t)
	// A policy, so that the coordinator audits its decisions.
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("default: allow\nrules:\n  - {tool: \"demo:sha256\", effect: deny, reason: not today}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.PolicyFile = policy })
	hostile := worker.Func("say", hostileDescription, func(ctx context.Context, in struct{}) (string, error) {
		return `<img src=x onerror=alert(2)>`, nil
	})
	picture := worker.Func("picture", "Returns a PNG and an SVG that holds a script.", func(ctx context.Context, in struct{}) (string, error) { return "", nil })
	picture.Handler = worker.HandlerFunc(func(ctx context.Context, call *worker.Call) (*worker.Result, error) {
		return &worker.Result{Content: []messages.ContentBlock{
			messages.ImageBlock(pngPixel, "image/png"),
			messages.ImageBlock([]byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(3)</script></svg>`), "image/svg+xml"),
		}}, nil
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()}, worker.Namespace{Name: "hostile", Tools: []worker.Tool{hostile, picture}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	cfg := admin.Config{Client: c, Tokens: map[string]admin.Operator{testToken: {Name: "alice"}}, Logger: testenv.Logger(t)}
	for _, m := range mutate {
		m(&cfg)
	}
	console, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(console.Handler())
	t.Cleanup(hs.Close)
	return &testBundle{url: hs.URL, client: c, server: hs}
}

// browser is an HTTP client with a cookie jar that does not follow redirects.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

func do(t *testing.T, hc *http.Client, method, target string, form url.Values, header map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(data)
}

// login logs the client in and returns the session's CSRF token.
func (b *testBundle) login(t *testing.T, hc *http.Client) string {
	t.Helper()
	resp, _ := do(t, hc, "POST", b.url+"/login", url.Values{"token": {testToken}, "next": {"/catalog"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/catalog" {
		t.Fatalf("login: %s, to %q", resp.Status, resp.Header.Get("Location"))
	}
	resp, page := do(t, hc, "GET", b.url+"/catalog", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("catalog after login: %s\n%s", resp.Status, page)
	}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the catalog page:\n%s", page)
	}
	return m[1]
}

// toolDisabled reports whether the catalog says an operator disabled the tool.
func (b *testBundle) toolDisabled(t *testing.T, name string) bool {
	t.Helper()
	reply, err := b.client.ListTools(testenv.Context(t), messages.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range reply.Tools {
		if tool.Name == name {
			return tool.Disabled
		}
	}
	t.Fatalf("tool %s not in the catalog", name)
	return false
}

// TestNothingIsServedWithoutALogin: pages send a browser to the login
// page, event streams and forms get 401, and the login page and assets
// are open.
func TestNothingIsServedWithoutALogin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	for _, path := range []string{"/", "/dashboard", "/catalog", "/calls", "/approvals", "/audit", "/turns/t1", "/calls/abc"} {
		resp, _ := do(t, hc, "GET", b.url+path, nil, nil)
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login?next=") {
			t.Errorf("GET %s without a session: %s to %q, want a redirect to the login page", path, resp.Status, resp.Header.Get("Location"))
		}
	}
	resp, _ := do(t, hc, "GET", b.url+"/calls/abc/events", nil, map[string]string{"Accept": "text/event-stream"})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("event stream without a session: %s, want 401", resp.Status)
	}
	resp, _ = do(t, hc, "POST", b.url+"/tools/switch", url.Values{"name": {"demo-echo"}, "enable": {"false"}, "reason": {"x"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("form without a session: %s, want 401", resp.Status)
	}
	if b.toolDisabled(t, "demo-echo") {
		t.Error("a form without a session disabled the tool")
	}
	resp, page := do(t, hc, "GET", b.url+"/login", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `name="token"`) {
		t.Errorf("login page: %s\n%s", resp.Status, page)
	}
	resp, _ = do(t, hc, "GET", b.url+"/static/console.js", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("script: %s", resp.Status)
	}
}

// TestWrongTokenIsRefused: an unknown token gets 401 and no session; the
// right one a session cookie that is HttpOnly and SameSite=Strict.
func TestWrongTokenIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	resp, page := do(t, hc, "POST", b.url+"/login", url.Values{"token": {"operator-token-0123456788"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "Unknown token") {
		t.Fatalf("wrong token: %s\n%s", resp.Status, page)
	}
	if len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token got cookies: %v", resp.Cookies())
	}
	resp, _ = do(t, hc, "GET", b.url+"/catalog", nil, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("catalog after a wrong token: %s, want a redirect to the login page", resp.Status)
	}
	resp, _ = do(t, hc, "POST", b.url+"/login", url.Values{"token": {testToken}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("right token: %s", resp.Status)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "toolbus_console" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie: %+v, want HttpOnly and SameSite=Strict", cookie)
	}
	resp, page = do(t, hc, "GET", b.url+"/catalog", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "demo-echo") || !strings.Contains(page, "alice") {
		t.Fatalf("catalog after login: %s\n%s", resp.Status, page)
	}
}

// TestFailedLoginsAreLimited: after ten wrong tokens in a minute, an
// address is answered 429, even with the right token.
func TestFailedLoginsAreLimited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	for i := range 10 {
		resp, _ := do(t, hc, "POST", b.url+"/login", url.Values{"token": {fmt.Sprintf("wrong-token-%020d", i)}}, nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %s, want 401", i, resp.Status)
		}
	}
	resp, _ := do(t, hc, "POST", b.url+"/login", url.Values{"token": {testToken}}, nil)
	if resp.StatusCode != http.StatusTooManyRequests || len(resp.Cookies()) != 0 {
		t.Fatalf("login after ten failures: %s, cookies %v; want 429 and no session", resp.Status, resp.Cookies())
	}
}

// TestPostWithoutCSRFTokenIsRefused: a logged-in session's form without
// its CSRF token, or with another, changes nothing; with it, the tool is
// disabled.
func TestPostWithoutCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	csrf := b.login(t, hc)
	form := url.Values{"name": {"demo-echo"}, "enable": {"false"}, "reason": {"maintenance"}}
	for _, token := range []string{"", "not-the-token"} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		if token != "" {
			f.Set("csrf", token)
		}
		resp, page := do(t, hc, "POST", b.url+"/tools/switch", f, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "CSRF") {
			t.Errorf("POST with CSRF token %q: %s %s, want 403", token, resp.Status, page)
		}
	}
	if b.toolDisabled(t, "demo-echo") {
		t.Fatal("a POST without the CSRF token disabled the tool")
	}
	form.Set("csrf", csrf)
	resp, _ := do(t, hc, "POST", b.url+"/tools/switch", form, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST with the CSRF token: %s", resp.Status)
	}
	if !b.toolDisabled(t, "demo-echo") {
		t.Fatal("the POST with the CSRF token did not disable the tool")
	}
}

// TestCrossOriginPostIsRefused: a form posted from another site is
// refused even with the session's cookie and CSRF token; from the
// console's own origin it goes through.
func TestCrossOriginPostIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	csrf := b.login(t, hc)
	form := url.Values{"name": {"demo-echo"}, "enable": {"false"}, "reason": {"maintenance"}, "csrf": {csrf}}
	for _, h := range []map[string]string{
		{"Origin": "http://evil.example"},
		{"Origin": "null"},
		{"Referer": "http://evil.example/page"},
		{"Sec-Fetch-Site": "cross-site", "Origin": b.url},
	} {
		resp, page := do(t, hc, "POST", b.url+"/tools/switch", form, h)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "cross-origin") {
			t.Errorf("POST with %v: %s %s, want 403", h, resp.Status, page)
		}
	}
	if b.toolDisabled(t, "demo-echo") {
		t.Fatal("a cross-origin POST disabled the tool")
	}
	resp, _ := do(t, hc, "POST", b.url+"/tools/switch", form, map[string]string{"Origin": b.url, "Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != http.StatusSeeOther || !b.toolDisabled(t, "demo-echo") {
		t.Fatalf("same-origin POST: %s; the tool is disabled: %v", resp.Status, b.toolDisabled(t, "demo-echo"))
	}
}

// TestHostileToolTextIsEscaped: what a tool says of itself and returns
// reaches the pages as text, never as markup.
func TestHostileToolTextIsEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	b.login(t, hc)
	_, page := do(t, hc, "GET", b.url+"/catalog", nil, nil)
	if !strings.Contains(page, "hostile-say") {
		t.Fatalf("the hostile tool is not listed:\n%s", page)
	}
	if strings.Contains(page, "<script>document.title") || strings.Contains(page, "<img src=x") {
		t.Fatalf("the catalog page holds the tool's markup unescaped:\n%s", page)
	}
	if !strings.Contains(page, "&lt;script&gt;document.title") {
		t.Fatalf("the catalog page does not show the description escaped:\n%s", page)
	}
	ctx := testenv.Context(t)
	res, err := b.client.Call(ctx, "hostile-say", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	resp, page := do(t, hc, "GET", b.url+"/calls/"+res.CallID, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "&lt;img src=x onerror=alert(2)&gt;") || strings.Contains(page, "<img src=x") {
		t.Fatalf("call page: %s\n%s", resp.Status, page)
	}
}

// TestResultImages: a PNG of a result is shown inline, an SVG (a document
// that may hold script) is only named.
func TestResultImages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	b.login(t, hc)
	res, err := b.client.Call(testenv.Context(t), "hostile-picture", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	_, page := do(t, hc, "GET", b.url+"/calls/"+res.CallID, nil, nil)
	if !strings.Contains(page, `<img src="data:image/png;base64,`+base64.StdEncoding.EncodeToString(pngPixel)+`"`) {
		t.Fatalf("the PNG is not shown inline:\n%s", page)
	}
	if strings.Contains(page, "data:image/svg") || !strings.Contains(page, "image of type image/svg&#43;xml") {
		t.Fatalf("the SVG is shown inline, or not named:\n%s", page)
	}
}

// TestWithoutTokensOnlyLoopbackIsServed: a console without tokens serves
// loopback clients, and refuses a client from elsewhere and a page that
// reached it under another host name (DNS rebinding).
func TestWithoutTokensOnlyLoopbackIsServed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *admin.Config) { c.Tokens = nil; c.LoopbackWithoutTokens = true })
	hc := browser(t)
	resp, page := do(t, hc, "GET", b.url+"/catalog", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "demo-echo") {
		t.Fatalf("loopback client: %s", resp.Status)
	}
	resp, _ = do(t, hc, "GET", b.url+"/catalog", nil, map[string]string{"Host": "evil.example"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("request for host evil.example: %s, want 403", resp.Status)
	}
	// A client from another address, as the server's connection says.
	req := httptest.NewRequest("GET", "/catalog", nil)
	req.RemoteAddr = "192.0.2.7:40000"
	req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8090}))
	rec := httptest.NewRecorder()
	b.server.Config.Handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("client from 192.0.2.7: %d, want 403", rec.Code)
	}
}

// TestConfigIsValidated: a console refuses to start without tokens (unless
// told to serve loopback without them) and with short tokens.
func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	c := &client.Client{}
	for _, cfg := range []admin.Config{
		{},
		{Client: c},
		{Client: c, Tokens: map[string]admin.Operator{"short": {Name: "a"}}},
		{Client: c, Tokens: map[string]admin.Operator{testToken: {}}},
		{Client: c, LoopbackWithoutTokens: true, TraceURL: "http://jaeger/trace"},
	} {
		if _, err := admin.New(cfg); !errors.Is(err, admin.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// TestCallPageLinksItsTrace: a call submitted in a trace shows that
// trace's ID, linked with the configured tracing UI's URL template.
func TestCallPageLinksItsTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *admin.Config) { c.TraceURL = "https://traces.example/trace/{trace_id}?view=full" })
	hc := browser(t)
	b.login(t, hc)
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(testenv.Context(t), trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, Remote: true}))
	res, err := b.client.Call(ctx, "demo-echo", map[string]any{"text": "traced"})
	if err != nil {
		t.Fatal(err)
	}
	_, page := do(t, hc, "GET", b.url+"/calls/"+res.CallID, nil, nil)
	if !strings.Contains(page, `href="https://traces.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?view=full"`) {
		t.Fatalf("the call page does not link the call's trace:\n%s", page)
	}
	// A call outside any trace has no trace to link.
	res, err = b.client.Call(testenv.Context(t), "demo-echo", map[string]any{"text": "untraced"})
	if err != nil {
		t.Fatal(err)
	}
	_, page = do(t, hc, "GET", b.url+"/calls/"+res.CallID, nil, nil)
	if strings.Contains(page, "trace-link") {
		t.Fatalf("a call without a trace links one:\n%s", page)
	}
}

// TestAuditAndTurnPages: the audit page shows the policy's decisions on
// calls, newest first, filtered by decision; the turn page its calls.
func TestAuditAndTurnPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	b.login(t, hc)
	ctx := testenv.Context(t)
	first, err := b.client.Call(ctx, "demo-echo", map[string]any{"text": "one"}, client.WithTurn("turn-audit"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.client.Call(ctx, "demo-echo", map[string]any{"text": "two"}, client.WithTurn("turn-audit"))
	if err != nil {
		t.Fatal(err)
	}
	// An allowed call's record is copied into the audit log a moment
	// after the call is queued.
	var page string
	var i, j int
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(50 * time.Millisecond) {
		_, page = do(t, hc, "GET", b.url+"/audit?decision=allowed", nil, nil)
		i, j = strings.Index(page, second.CallID), strings.Index(page, first.CallID)
		if (i >= 0 && j >= 0) || time.Now().After(deadline) {
			break
		}
	}
	if i < 0 || j < 0 || i > j {
		t.Fatalf("the audit page does not list both calls' records, newest first (at %d and %d):\n%s", i, j, page)
	}
	if _, err := b.client.Submit(ctx, messages.SubmitRequest{Tool: "demo-sha256", Arguments: messages.JSON(`{"text":"x"}`)}); !errors.Is(err, messages.ErrDenied) {
		t.Fatalf("submit of demo-sha256: %v, want denied", err)
	}
	_, page = do(t, hc, "GET", b.url+"/audit?decision=denied", nil, nil)
	if strings.Contains(page, first.CallID) || !strings.Contains(page, "not today") {
		t.Fatalf("the audit page filtered on denied does not list just the denied call:\n%s", page)
	}
	// A page of one record links the next, older one; a tool filter
	// takes any spelling of the tool's name.
	_, page = do(t, hc, "GET", b.url+"/audit?decision=allowed&limit=1", nil, nil)
	older := regexp.MustCompile(`href="(/audit\?[^"]+)" id="older"`).FindStringSubmatch(page)
	if !strings.Contains(page, second.CallID) || strings.Contains(page, first.CallID) || older == nil {
		t.Fatalf("the audit page of one record:\n%s", page)
	}
	_, page = do(t, hc, "GET", b.url+html.UnescapeString(older[1]), nil, nil)
	if !strings.Contains(page, first.CallID) || strings.Contains(page, second.CallID) {
		t.Fatalf("the older page of the audit log:\n%s", page)
	}
	_, page = do(t, hc, "GET", b.url+"/audit?tool=demo:sha256", nil, nil)
	if !strings.Contains(page, "not today") || strings.Contains(page, first.CallID) {
		t.Fatalf("the audit page filtered on demo:sha256:\n%s", page)
	}
	_, page = do(t, hc, "GET", b.url+"/audit?since=2000-01-01T00:00&until=2000-01-02T00:00", nil, nil)
	if strings.Contains(page, "audit-row") || strings.Contains(page, `id="audit-error"`) {
		t.Fatalf("the audit page of a day long gone:\n%s", page)
	}
	resp, page := do(t, hc, "GET", b.url+"/turns/turn-audit", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, first.CallID) || !strings.Contains(page, second.CallID) {
		t.Fatalf("turn page: %s\n%s", resp.Status, page)
	}
	resp, _ = do(t, hc, "GET", b.url+"/turns/no-such-turn", nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown turn: %s, want 404", resp.Status)
	}
}

// TestEventStreamResumes: a call's event stream sends each event of its
// timeline with its place as the id, then the result and end; a browser
// that reconnects with Last-Event-ID gets only the events after it.
func TestEventStreamResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	b.login(t, hc)
	res, err := b.client.Call(testenv.Context(t), "demo-echo", map[string]any{"text": "streamed"})
	if err != nil {
		t.Fatal(err)
	}
	stream := func(lastID string) (ids []string, events []string, body string) {
		h := map[string]string{"Accept": "text/event-stream"}
		if lastID != "" {
			h["Last-Event-ID"] = lastID
		}
		resp, body := do(t, hc, "GET", b.url+"/calls/"+res.CallID+"/events", nil, h)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("event stream: %s %s", resp.Status, resp.Header.Get("Content-Type"))
		}
		for line := range strings.SplitSeq(body, "\n") {
			if id, ok := strings.CutPrefix(line, "id: "); ok {
				ids = append(ids, id)
			}
			if ev, ok := strings.CutPrefix(line, "event: "); ok {
				events = append(events, ev)
			}
		}
		return ids, events, body
	}
	ids, events, body := stream("")
	if len(events) < 4 || events[0] != "ev" || events[len(events)-2] != "result" || events[len(events)-1] != "end" || ids[0] != "1" {
		t.Fatalf("event stream of a finished call: events %v ids %v\n%s", events, ids, body)
	}
	if !strings.Contains(body, "event-queued") || !strings.Contains(body, "event-result") || !strings.Contains(body, "streamed") {
		t.Fatalf("the stream lacks the timeline or the result:\n%s", body)
	}
	// ids: one per event, the result's and end's repeating the last ev's.
	last := ids[len(ids)-1]
	lastN, _ := strconv.Atoi(last)
	before := strconv.Itoa(lastN - 1)
	ids, events, body = stream(before)
	if !slices.Equal(events, []string{"ev", "result", "end"}) || ids[0] != last {
		t.Fatalf("resumed after event %s: events %v ids %v, want the result's ev, result and end\n%s", before, events, ids, body)
	}
	ids, events, body = stream(last)
	if !slices.Equal(events, []string{"end"}) {
		t.Fatalf("resumed after the last event: events %v ids %v, want end alone\n%s", events, ids, body)
	}
}

// TestDashboardRefusals: the console opens on the dashboard; a namespace
// that is not one is refused with its rule; a coordinator that does not
// answer stats.calls (older than the console) is named as the cause.
func TestDashboardRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	b.login(t, hc)
	resp, _ := do(t, hc, "GET", b.url+"/", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard" {
		t.Errorf("GET /: %s to %q, want the dashboard", resp.Status, resp.Header.Get("Location"))
	}
	resp, page := do(t, hc, "GET", b.url+"/dashboard?namespace="+url.QueryEscape("no such/namespace"), nil, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, `id="dashboard-error"`) || !strings.Contains(page, "namespace: ") {
		t.Errorf("a bad namespace: %s\n%s", resp.Status, page)
	}

	// A bus where no coordinator answers stats.calls.
	srv := testenv.Server(t)
	c := testenv.Client(t, srv.URL(), client.Options{NoCoordinatorWait: 100 * time.Millisecond})
	console, err := admin.New(admin.Config{Client: c, Tokens: map[string]admin.Operator{testToken: {Name: "alice"}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(console.Handler())
	t.Cleanup(hs.Close)
	hc = browser(t)
	resp, _ = do(t, hc, "POST", hs.URL+"/login", url.Values{"token": {testToken}, "next": {"/dashboard"}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s", resp.Status)
	}
	resp, page = do(t, hc, "GET", hs.URL+"/dashboard", nil, nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(page, "No coordinator answers stats.calls") {
		t.Errorf("the dashboard without a coordinator that answers stats.calls: %s\n%s", resp.Status, page)
	}
}
