package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/internal/dev/oidctest"
	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/admin"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/support/oidc"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/worker"
)

const consoleClient = "toolbus-console"

// oidcConsole starts a console on a real bus that logs operators in with
// the issuer (and with the test token), and registers it at the issuer
// with two users: olga, of the operators' group, and carol, who is not.
func oidcConsole(t *testing.T, iss *oidctest.Issuer, mutate ...func(*oidc.Config)) string {
	t.Helper()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	var handler atomic.Value
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.Load().(http.Handler).ServeHTTP(w, r) }))
	t.Cleanup(hs.Close)
	redirect := hs.URL + "/login/oidc/callback"
	iss.AddClient(oidctest.Client{ID: consoleClient, Secret: "console-secret", RedirectURIs: []string{redirect}})
	iss.AddUser("olga", map[string]any{"groups": []any{"staff", "toolbus-operators"}, "preferred_username": "olga"})
	iss.AddUser("carol", map[string]any{"groups": []any{"staff"}, "preferred_username": "carol"})
	vcfg := oidc.Config{Issuer: iss.URL, Audiences: []string{consoleClient}}
	for _, m := range mutate {
		m(&vcfg)
	}
	v, err := oidc.NewVerifier(vcfg)
	if err != nil {
		t.Fatal(err)
	}
	console, err := admin.New(admin.Config{
		Client: testenv.Client(t, srv.URL(), client.Options{}),
		Tokens: map[string]admin.Operator{testToken: {Name: "alice"}},
		OIDC: &admin.OIDCLogin{Verifier: v, ClientID: consoleClient, ClientSecret: "console-secret", RedirectURL: redirect,
			OperatorsClaim: "groups", OperatorsValue: "toolbus-operators"},
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	handler.Store(console.Handler())
	return hs.URL
}

// startLogin asks the console to log in with the issuer and returns the
// authorization URL it sent the browser to.
func startLogin(t *testing.T, hc *http.Client, consoleURL string) *url.URL {
	t.Helper()
	resp, _ := do(t, hc, "GET", consoleURL+"/login/oidc?next=/catalog", nil, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login with the issuer: %s", resp.Status)
	}
	u, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// authorize has the issuer log user in and returns where it sends the
// browser back to.
func authorize(t *testing.T, hc *http.Client, authz *url.URL, user string) string {
	t.Helper()
	q := authz.Query()
	q.Set("login_hint", user)
	authz.RawQuery = q.Encode()
	resp, body := do(t, hc, "GET", authz.String(), nil, nil)
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("the issuer's authorization: %s %s", resp.Status, body)
	}
	return resp.Header.Get("Location")
}

// TestOIDCLogin: an operator logs in with the issuer (the authorization
// code flow with PKCE, the console a confidential client): the console
// sends the browser to the issuer with a state, a nonce and an S256
// challenge, exchanges the code, checks the ID token, and opens a session
// named by the user's name. The issuer's answer is refused when it is
// replayed, reaches another browser, is an error, names another issuer,
// or is for a user who is not in the operators' group; tokens still work.
func TestOIDCLogin(t *testing.T) {
	t.Parallel()
	iss := oidctest.Start(t)
	consoleURL := oidcConsole(t, iss)
	hc := browser(t)

	_, page := do(t, hc, "GET", consoleURL+"/login", nil, nil)
	if !strings.Contains(page, `id="login-oidc"`) || !strings.Contains(page, `id="token"`) {
		t.Fatalf("the login page offers neither the issuer nor a token:\n%s", page)
	}
	authz := startLogin(t, hc, consoleURL)
	q := authz.Query()
	for k, want := range map[string]string{"client_id": consoleClient, "response_type": "code", "code_challenge_method": "S256", "redirect_uri": consoleURL + "/login/oidc/callback"} {
		if q.Get(k) != want {
			t.Errorf("authorization request %s=%q, want %q", k, q.Get(k), want)
		}
	}
	for _, k := range []string{"state", "nonce", "code_challenge"} {
		if len(q.Get(k)) < 32 {
			t.Errorf("authorization request %s=%q: not a random value", k, q.Get(k))
		}
	}
	if !strings.Contains(q.Get("scope"), "openid") {
		t.Errorf("scope %q", q.Get("scope"))
	}
	callback := authorize(t, hc, authz, "olga")
	resp, page := do(t, hc, "GET", callback, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `http-equiv="refresh" content="0; url=/catalog"`) {
		t.Fatalf("the callback: %s\n%s", resp.Status, page)
	}
	resp, page = do(t, hc, "GET", consoleURL+"/catalog", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `<span id="operator">olga</span>`) {
		t.Fatalf("the catalog after the login: %s\n%s", resp.Status, page)
	}
	if n := iss.Requests("/token"); n != 1 {
		t.Errorf("%d code exchanges", n)
	}

	// The same answer again: its state was used.
	if resp, _ := do(t, browser(t), "GET", callback, nil, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the answer in another browser: %s", resp.Status)
	}
	if resp, _ := do(t, hc, "GET", callback, nil, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the answer replayed: %s", resp.Status)
	}

	refused := func(what, user string, edit func(string) string, status int, says string) {
		t.Helper()
		hc := browser(t)
		back := authorize(t, hc, startLogin(t, hc, consoleURL), user)
		resp, page := do(t, hc, "GET", edit(back), nil, nil)
		if resp.StatusCode != status || !strings.Contains(page, says) {
			t.Errorf("%s: %s, want %d saying %q:\n%s", what, resp.Status, status, says, page)
		}
		if resp, _ := do(t, hc, "GET", consoleURL+"/catalog", nil, nil); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s: the catalog after a refused login: %s", what, resp.Status)
		}
	}
	same := func(s string) string { return s }
	refused("a user not in the operators' group", "carol", same, http.StatusForbidden, "carol is not an operator of this console")
	refused("an error of the issuer", "olga", func(s string) string {
		u, _ := url.Parse(s)
		q := u.Query()
		q.Del("code")
		q.Set("error", "access_denied")
		u.RawQuery = q.Encode()
		return u.String()
	}, http.StatusUnauthorized, "access_denied")
	refused("another issuer's answer", "olga", func(s string) string {
		return strings.Replace(s, "iss="+url.QueryEscape(iss.URL), "iss="+url.QueryEscape("https://evil.example"), 1)
	}, http.StatusBadRequest, "another identity provider")
	refused("a code the issuer did not give", "olga", func(s string) string {
		u, _ := url.Parse(s)
		q := u.Query()
		q.Set("code", "forged")
		u.RawQuery = q.Encode()
		return u.String()
	}, http.StatusBadGateway, "invalid_grant")

	// The token login still works.
	b := &testBundle{url: consoleURL}
	b.login(t, browser(t))
}

// TestOIDCLoginWithTheIssuerDown: the login page says the identity
// provider cannot be reached, at once after the first try, and the token
// login still works.
func TestOIDCLoginWithTheIssuerDown(t *testing.T) {
	t.Parallel()
	iss := oidctest.Start(t)
	consoleURL := oidcConsole(t, iss)
	iss.Close()
	resp, page := do(t, browser(t), "GET", consoleURL+"/login/oidc", nil, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(page, "cannot be reached") || !strings.Contains(page, `id="token"`) {
		t.Errorf("with the issuer down: %s\n%s", resp.Status, page)
	}
	b := &testBundle{url: consoleURL}
	b.login(t, browser(t))
}

// TestBrowserOIDCLogin: in headless Chromium, an operator opens a page of
// the console, chooses the identity provider, logs in on the issuer's
// page (of another site), and lands on the page it asked for as itself.
func TestBrowserOIDCLogin(t *testing.T) {
	binary := chromium(t)
	// On localhost, the issuer is another site than the console: the
	// browser comes back from it as from an organisation's.
	iss := oidctest.Start(t, oidctest.Host("localhost"))
	consoleURL := oidcConsole(t, iss)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(binary), chromedp.UserDataDir(t.TempDir()), chromedp.DisableGPU)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(tab, 60*time.Second)
	defer cancel()
	err := chromedp.Do(ctx,
		chromedp.Navigate(consoleURL+"/approvals"),
		chromedp.WaitVisible(chromedp.ID("login-oidc")),
		chromedp.Click(chromedp.ID("login-oidc")),
		// The issuer's page.
		chromedp.WaitVisible(chromedp.ID("username")),
	)
	var title, operator, path string
	if err == nil {
		title, err = chromedp.Run(ctx, chromedp.Title())
	}
	if err == nil {
		err = chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("username"), "olga"),
			chromedp.Click(chromedp.ID("login")),
			// Back on the console, on the page first asked for.
			chromedp.WaitVisible(chromedp.ID("operator")),
		)
	}
	if err == nil {
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](`location.pathname === "/approvals"`, chromedp.WithPollingTimeout(30*time.Second)))
	}
	if err == nil {
		operator, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("operator")))
	}
	if err == nil {
		path, err = chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`))
	}
	if err != nil {
		page, _ := chromedp.Run(tab, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText.slice(0, 2000)`))
		t.Fatalf("the login in the browser: %v\n%s", err, page)
	}
	if operator != "olga" || path != "/approvals" || !strings.Contains(title, "Test issuer") {
		t.Errorf("logged in as %q on %s (the issuer's page was %q)", operator, path, title)
	}
}
