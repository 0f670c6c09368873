package admin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// sessionCookie names the cookie that holds a session's ID.
const sessionCookie = "toolbus_console"

// devOperator is who a console without tokens serves on loopback.
const devOperator = "dev"

// session is one operator's login.
type session struct {
	id       string
	operator string
	// csrf is the token every POST of the session must carry.
	csrf    string
	expires time.Time
	// notice is the outcome of the session's last form, shown by its
	// next page; guarded by sessions.mu.
	notice string
}

// sessions holds the logins in memory, at most max of them.
type sessions struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu   sync.Mutex
	byID map[string]*session
}

func newSessions(ttl time.Duration, max int) *sessions {
	return &sessions{ttl: ttl, max: max, now: time.Now, byID: map[string]*session{}}
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for the operator, ending the oldest one when
// max are held.
func (s *sessions) create(operator string) *session {
	now := s.now()
	ses := &session{id: randomToken(), operator: operator, csrf: randomToken(), expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, old := range s.byID {
		if now.After(old.expires) {
			delete(s.byID, id)
		}
	}
	if len(s.byID) >= s.max {
		var oldest *session
		for _, old := range s.byID {
			if oldest == nil || old.expires.Before(oldest.expires) {
				oldest = old
			}
		}
		delete(s.byID, oldest.id)
	}
	s.byID[ses.id] = ses
	return ses
}

// get returns the live session of the ID.
func (s *sessions) get(id string) (*session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ses, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	if s.now().After(ses.expires) {
		delete(s.byID, id)
		return nil, false
	}
	return ses, true
}

func (s *sessions) setNotice(ses *session, notice string) {
	s.mu.Lock()
	ses.notice = notice
	s.mu.Unlock()
}

// takeNotice returns the session's notice, once.
func (s *sessions) takeNotice(ses *session) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	notice := ses.notice
	ses.notice = ""
	return notice
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	delete(s.byID, id)
	s.mu.Unlock()
}

type sessionKey struct{}

func sessionOf(ctx context.Context) *session {
	ses, _ := ctx.Value(sessionKey{}).(*session)
	return ses
}

// access is who an operator is, and what a request must show to act as
// one: the login with a token (here) or with the identity provider
// (oidc.go), bounded by the limiter of failed logins; the session's
// cookie; and the checks of a state-changing request (same origin, the
// session's CSRF token).
type access struct {
	cfg *Config
	*views
	limiter *loginLimiter
	// pending are the identity provider's logins in progress.
	pending pendingLogins
}

// operatorFor returns the operator of a login token. Every token is
// compared, in constant time, so that the time taken says nothing of
// which token came close.
func (a *access) operatorFor(token string) (Operator, bool) {
	var found Operator
	ok := 0
	for known, op := range a.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(known), []byte(token)) == 1 {
			found, ok = op, 1
		}
	}
	return found, ok == 1
}

// loopbackRequest reports whether the request came over loopback, to a
// loopback address, naming a loopback host: the last check refuses a page
// of another site that had its name resolve to 127.0.0.1 (DNS rebinding).
func loopbackRequest(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || !loopbackAddr(local.String()) || !loopbackAddr(r.RemoteAddr) {
		return false
	}
	return loopbackAddr(r.Host)
}

// loopbackAddr reports whether addr, a host:port or a host, is a loopback address.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// authenticate finds the request's session. Without tokens a loopback
// request gets a session of its own on its first visit; with tokens a
// page request without one is sent to the login page, and anything else
// is answered 401.
func (a *access) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.loginRequired() && !loopbackRequest(r) {
			http.Error(w, "Forbidden: this console has no tokens and serves loopback clients only", http.StatusForbidden)
			return
		}
		if cookie, err := r.Cookie(sessionCookie); err == nil {
			if ses, ok := a.sessions.get(cookie.Value); ok {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, ses)))
				return
			}
		}
		if !a.loginRequired() {
			ses := a.sessions.create(devOperator)
			a.setSessionCookie(w, ses)
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, ses)))
			return
		}
		if r.Method == http.MethodGet && !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		http.Error(w, "Unauthorized: log in (/login)", http.StatusUnauthorized)
	})
}

func (a *access) setSessionCookie(w http.ResponseWriter, ses *session) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    ses.id,
		Path:     "/",
		Expires:  ses.expires,
		HttpOnly: true,
		Secure:   a.cfg.SecureCookies,
		SameSite: http.SameSiteStrictMode,
	})
}

// checkPost refuses a state-changing request that another site could have
// made: one whose Origin (or, without it, Referer) is not the console's,
// one the browser marks cross-site, and one without the session's CSRF
// token. The body is bounded first.
func (a *access) checkPost(w http.ResponseWriter, r *http.Request, ses *session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, a.cfg.MaxRequestBytes)
	if !a.sameOrigin(r) {
		http.Error(w, "Forbidden: cross-origin request", http.StatusForbidden)
		return false
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "Bad request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	token := r.PostFormValue("csrf")
	if token == "" {
		token = r.Header.Get("X-CSRF-Token")
	}
	if ses == nil || subtle.ConstantTimeCompare([]byte(token), []byte(ses.csrf)) != 1 {
		http.Error(w, "Forbidden: missing or wrong CSRF token (reload the page)", http.StatusForbidden)
		return false
	}
	return true
}

// sameOrigin reports whether the request comes from one of the console's
// own pages, as far as the browser says: Sec-Fetch-Site, then Origin, then
// Referer. A request that names none (not a browser's) passes, and is held
// to the CSRF token alone.
func (a *access) sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		ref, err := url.Parse(r.Header.Get("Referer"))
		if err != nil || ref.Host == "" {
			return true
		}
		origin = ref.Scheme + "://" + ref.Host
	}
	for _, o := range a.cfg.AllowedOrigins {
		if origin == o {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

func (a *access) loginPage(w http.ResponseWriter, r *http.Request) {
	if !a.loginRequired() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	a.render(w, r, http.StatusOK, "login", pageData{Title: "Log in", Page: a.loginView(r.URL.Query().Get("next"))})
}

// loginView is what the login page offers: a token, the identity
// provider, or both.
type loginView struct {
	Next         string
	Tokens, OIDC bool
}

func (a *access) loginView(next string) loginView {
	return loginView{Next: safeNext(next), Tokens: len(a.cfg.Tokens) > 0, OIDC: a.cfg.OIDC != nil}
}

// loginRequired reports whether operators log in (with a token or the
// identity provider); otherwise the console serves loopback clients as
// operator dev.
func (a *access) loginRequired() bool { return len(a.cfg.Tokens) > 0 || a.cfg.OIDC != nil }

// safeNext keeps a redirect after login on the console: a path, never
// another site ("//evil.example", "https://…").
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.ContainsAny(next, "\r\n") {
		return "/"
	}
	return next
}

func (a *access) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, a.cfg.MaxRequestBytes)
	if !a.sameOrigin(r) {
		http.Error(w, "Forbidden: cross-origin request", http.StatusForbidden)
		return
	}
	if !a.loginRequired() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if len(a.cfg.Tokens) == 0 {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "Bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	if !a.limiter.allowed(r.RemoteAddr) {
		w.Header().Set("Retry-After", "60")
		http.Error(w, "Too many failed logins from this address; try again in a minute", http.StatusTooManyRequests)
		return
	}
	op, ok := a.operatorFor(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		a.limiter.failed(r.RemoteAddr)
		a.cfg.Logger.Warn("console login refused", "remote", r.RemoteAddr)
		a.render(w, r, http.StatusUnauthorized, "login", pageData{Title: "Log in", Error: "Unknown token.", Page: a.loginView(next)})
		return
	}
	if old, err := r.Cookie(sessionCookie); err == nil {
		a.sessions.end(old.Value)
	}
	ses := a.sessions.create(op.Name)
	a.setSessionCookie(w, ses)
	a.cfg.Logger.Info("console login", "operator", op.Name, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (a *access) logout(w http.ResponseWriter, r *http.Request) {
	ses := sessionOf(r.Context())
	if !a.checkPost(w, r, ses) {
		return
	}
	a.sessions.end(ses.id)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: a.cfg.SecureCookies, SameSite: http.SameSiteStrictMode})
	if !a.loginRequired() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
