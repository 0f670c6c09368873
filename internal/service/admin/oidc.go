package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/support/oidc"
)

// OIDCLogin logs operators in with an OpenID Connect issuer: the
// authorization code flow with PKCE (S256), the ID token checked (its
// signature by the issuer's keys, issuer, audience the client, expiry,
// and the nonce of the login), and only a user whose claims make it an
// operator gets a session.
type OIDCLogin struct {
	// Verifier checks the ID tokens: the issuer's, with the client ID as
	// their audience. Required.
	Verifier *oidc.Verifier
	// ClientID is the console's client at the issuer. Required.
	ClientID string
	// ClientSecret authenticates a confidential client at the token
	// endpoint (client_secret_basic); empty, the console is a public
	// client and its PKCE verifier is its proof.
	ClientSecret string
	// RedirectURL is the console's callback as the browser reaches it:
	// https://console.example.com/login/oidc/callback. Required; the
	// issuer must list it for the client.
	RedirectURL string
	// OperatorsClaim names the claim that makes a user an operator: the
	// boolean true, or with OperatorsValue a value or a list holding it (a
	// group). Required: the issuer's other users are refused.
	OperatorsClaim string
	OperatorsValue string
	// NameClaim names the claim that names the operator in the console's
	// reasons and logs; default preferred_username, then email, then sub.
	NameClaim string
	// Scopes asked for; default openid, profile and email.
	Scopes []string
	// HTTPClient reaches the token endpoint; default one with a 10 s
	// timeout.
	HTTPClient *http.Client
}

// The login in progress of a browser: bound to it by a cookie holding
// its state, kept in memory at most loginTTL.
const (
	loginCookie = "toolbus_console_login"
	loginTTL    = 10 * time.Minute
	maxLogins   = 10000
	// maxTokenResponse bounds the token endpoint's answer.
	maxTokenResponse = 1 << 20
)

type pendingLogin struct {
	verifier, nonce, next string
	expires               time.Time
}

type pendingLogins struct {
	mu      sync.Mutex
	byState map[string]*pendingLogin
}

func (p *pendingLogins) add(state string, l *pendingLogin) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.byState == nil {
		p.byState = map[string]*pendingLogin{}
	}
	for s, old := range p.byState {
		if now.After(old.expires) {
			delete(p.byState, s)
		}
	}
	if len(p.byState) >= maxLogins {
		// The oldest logins in progress end first.
		var oldest string
		for s, old := range p.byState {
			if oldest == "" || old.expires.Before(p.byState[oldest].expires) {
				oldest = s
			}
		}
		delete(p.byState, oldest)
	}
	p.byState[state] = l
}

// take returns the login of state once.
func (p *pendingLogins) take(state string) *pendingLogin {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.byState[state]
	delete(p.byState, state)
	if l == nil || time.Now().After(l.expires) {
		return nil
	}
	return l
}

func (o *OIDCLogin) check() error {
	u, err := url.Parse(o.RedirectURL)
	switch {
	case o.Verifier == nil || o.ClientID == "":
		return fmt.Errorf("%w: OIDC login needs a verifier and a client ID", ErrInvalidConfig)
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "/login/oidc/callback":
		return fmt.Errorf("%w: OIDC redirect URL %q: want the console's URL followed by /login/oidc/callback", ErrInvalidConfig, o.RedirectURL)
	case o.OperatorsClaim == "":
		return fmt.Errorf("%w: OIDC login needs the operators claim: the console logs in operators only", ErrInvalidConfig)
	}
	return nil
}

// startOIDC sends the browser to the issuer's authorization endpoint,
// with a state bound to it by a cookie, a nonce and a PKCE challenge.
func (a *access) startOIDC(w http.ResponseWriter, r *http.Request) {
	o := a.cfg.OIDC
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	meta, err := o.Verifier.Metadata(ctx)
	if err != nil {
		a.cfg.Logger.Warn("console login: the identity provider cannot be reached", "error", err)
		a.render(w, r, http.StatusServiceUnavailable, "login", pageData{Title: "Log in", Error: "The identity provider cannot be reached now; try again, or log in with a token.", Page: a.loginView(r.URL.Query().Get("next"))})
		return
	}
	state, verifier, nonce := randomToken(), randomToken(), randomToken()
	a.pending.add(state, &pendingLogin{verifier: verifier, nonce: nonce, next: safeNext(r.URL.Query().Get("next")), expires: time.Now().Add(loginTTL)})
	// Lax, not Strict: the browser comes back from the issuer's site,
	// and a Strict cookie would not come with it.
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: state, Path: "/login/oidc", MaxAge: int(loginTTL.Seconds()), HttpOnly: true, Secure: a.cfg.SecureCookies, SameSite: http.SameSiteLaxMode})
	sum := sha256.Sum256([]byte(verifier))
	scopes := o.Scopes
	if len(scopes) == 0 {
		scopes = []string{"openid", "profile", "email"}
	}
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {o.ClientID},
		"redirect_uri":          {o.RedirectURL},
		"scope":                 {strings.Join(scopes, " ")},
		"state":                 {state},
		"nonce":                 {nonce},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	target := meta.AuthorizationEndpoint
	if strings.Contains(target, "?") {
		target += "&" + q.Encode()
	} else {
		target += "?" + q.Encode()
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// finishOIDC takes the issuer's answer: the code is exchanged with the
// PKCE verifier, the ID token checked, and an operator gets a session.
func (a *access) finishOIDC(w http.ResponseWriter, r *http.Request) {
	o := a.cfg.OIDC
	refuse := func(status int, reason, shown string) {
		a.limiter.failed(r.RemoteAddr)
		a.cfg.Logger.Warn("console login refused", "remote", r.RemoteAddr, "reason", reason)
		a.render(w, r, status, "login", pageData{Title: "Log in", Error: shown, Page: a.loginView("/")})
	}
	if !a.limiter.allowed(r.RemoteAddr) {
		w.Header().Set("Retry-After", "60")
		http.Error(w, "Too many failed logins from this address; try again in a minute", http.StatusTooManyRequests)
		return
	}
	q := r.URL.Query()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/login/oidc", MaxAge: -1, HttpOnly: true, Secure: a.cfg.SecureCookies, SameSite: http.SameSiteLaxMode})
	cookie, err := r.Cookie(loginCookie)
	state := q.Get("state")
	if err != nil || state == "" || subtle.ConstantTimeCompare([]byte(cookie.Value), []byte(state)) != 1 {
		refuse(http.StatusBadRequest, "the state is not this browser's login", "This login was not started in this browser, or took too long: log in again.")
		return
	}
	login := a.pending.take(state)
	if login == nil {
		refuse(http.StatusBadRequest, "no login in progress for the state", "This login took too long, or was used already: log in again.")
		return
	}
	if e := q.Get("error"); e != "" {
		refuse(http.StatusUnauthorized, "the identity provider refused: "+e+" "+q.Get("error_description"), "The identity provider refused the login ("+e+").")
		return
	}
	if iss := q.Get("iss"); iss != "" && iss != o.Verifier.Issuer() {
		// RFC 9207: the answer of another issuer is not this login's.
		refuse(http.StatusBadRequest, "the answer names issuer "+iss, "The answer came from another identity provider.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	idToken, err := a.exchange(ctx, q.Get("code"), login.verifier)
	if err != nil {
		refuse(http.StatusBadGateway, "code exchange: "+err.Error(), "The identity provider did not give the console a token: "+err.Error())
		return
	}
	tok, err := o.Verifier.Verify(ctx, idToken)
	if err != nil {
		refuse(http.StatusUnauthorized, "ID token: "+err.Error(), "The identity provider's token cannot be used: "+err.Error())
		return
	}
	if nonce, _ := tok.String("nonce"); subtle.ConstantTimeCompare([]byte(nonce), []byte(login.nonce)) != 1 {
		refuse(http.StatusUnauthorized, "the ID token's nonce is not the login's", "The identity provider's token is not this login's.")
		return
	}
	name := a.operatorName(tok)
	operator, err := tok.Holds(o.OperatorsClaim, o.OperatorsValue)
	if err != nil || !operator {
		what := fmt.Sprintf("claim %s is not true", o.OperatorsClaim)
		if o.OperatorsValue != "" {
			what = fmt.Sprintf("claim %s does not hold %s", o.OperatorsClaim, o.OperatorsValue)
		}
		if err != nil {
			what = err.Error()
		}
		refuse(http.StatusForbidden, name+" is no operator: "+what, name+" is not an operator of this console ("+what+").")
		return
	}
	if old, err := r.Cookie(sessionCookie); err == nil {
		a.sessions.end(old.Value)
	}
	ses := a.sessions.create(name)
	a.setSessionCookie(w, ses)
	a.cfg.Logger.Info("console login", "operator", name, "issuer", tok.Issuer, "subject", tok.Subject, "remote", r.RemoteAddr)
	// A page of the console's own takes the browser on: a redirect would
	// carry on the issuer's cross-site navigation, with which the browser
	// sends no SameSite=Strict session cookie.
	a.render(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, ses)), http.StatusOK, "continue", pageData{Title: "Logged in", Refresh: login.next, Page: login.next})
}

// operatorName is the name a token's user is shown and logged by.
func (a *access) operatorName(tok *oidc.Token) string {
	claims := []string{"preferred_username", "email", "sub"}
	if a.cfg.OIDC.NameClaim != "" {
		claims = []string{a.cfg.OIDC.NameClaim, "sub"}
	}
	for _, claim := range claims {
		if s, ok := tok.String(claim); ok && s != "" && len(s) <= 200 && !strings.ContainsAny(s, "\r\n\t") {
			return s
		}
	}
	return tok.Subject
}

// exchange trades a code for the ID token at the issuer's token endpoint.
func (a *access) exchange(ctx context.Context, code, verifier string) (string, error) {
	o := a.cfg.OIDC
	if code == "" {
		return "", errors.New("the answer holds no code")
	}
	meta, err := o.Verifier.Metadata(ctx)
	if err != nil {
		return "", err
	}
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {o.RedirectURL},
		"code_verifier": {verifier},
	}
	if o.ClientSecret == "" {
		form.Set("client_id", o.ClientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, meta.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if o.ClientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(o.ClientID), url.QueryEscape(o.ClientSecret))
	}
	client := o.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse))
	if err != nil {
		return "", err
	}
	var answer struct {
		IDToken     string `json:"id_token"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		return "", fmt.Errorf("the token endpoint answered %s, not JSON", resp.Status)
	}
	if resp.StatusCode != http.StatusOK || answer.Error != "" {
		return "", fmt.Errorf("the token endpoint answered %s: %s %s", resp.Status, answer.Error, answer.Description)
	}
	if answer.IDToken == "" {
		return "", errors.New("the token endpoint gave no ID token (ask for the openid scope)")
	}
	return answer.IDToken, nil
}
