package admin

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/toolbus/toolbus/pkg/messages"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Console is the operators' web console; Handler serves it.
type Console struct {
	cfg Config
	// The pages are written through views; access says who the operator
	// of a request is (logins, sessions, the checks of a form).
	*views
	access *access
	// streams counts the event streams open now (Config.MaxStreams).
	streams atomic.Int64
}

// views writes the console's pages, each with the layout and the
// session's operator, CSRF token and notice, their fragments, and the
// redirect that answers a form.
type views struct {
	pages    map[string]*template.Template
	sessions *sessions
	log      *slog.Logger
}

// New returns a console; it validates the configuration.
func New(cfg Config) (*Console, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := messages.NewNames(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: Prefix: %v", ErrInvalidConfig, err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, views: &views{pages: pages, sessions: newSessions(cfg.SessionTTL, cfg.MaxSessions), log: cfg.Logger}}
	c.access = &access{cfg: &c.cfg, views: c.views, limiter: newLoginLimiter()}
	return c, nil
}

// parsePages parses each page with the layout and the shared fragments.
func parsePages() (map[string]*template.Template, error) {
	entries, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, path := range entries {
		name := strings.TrimSuffix(strings.TrimPrefix(path, "templates/"), ".html")
		if name == "layout" || name == "fragments" {
			continue
		}
		t, err := template.New(name).Funcs(templateFuncs).ParseFS(templateFiles, "templates/layout.html", "templates/fragments.html", path)
		if err != nil {
			return nil, fmt.Errorf("admin: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// Handler serves the console: the login page and the static assets to
// anyone, every other page to a session.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /login", c.access.loginPage)
	mux.HandleFunc("POST /login", c.access.login)
	if c.cfg.OIDC != nil {
		mux.HandleFunc("GET /login/oidc", c.access.startOIDC)
		mux.HandleFunc("GET /login/oidc/callback", c.access.finishOIDC)
	}

	private := http.NewServeMux()
	private.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/dashboard", http.StatusSeeOther) })
	private.HandleFunc("GET /dashboard", c.dashboardPage)
	private.HandleFunc("POST /logout", c.access.logout)
	private.HandleFunc("GET /catalog", c.catalogPage)
	private.HandleFunc("POST /tools/switch", c.switchTool)
	private.HandleFunc("GET /calls", c.callsPage)
	private.HandleFunc("GET /calls/{id}", c.callPage)
	private.HandleFunc("GET /calls/{id}/events", c.callEvents)
	private.HandleFunc("POST /calls/{id}/cancel", c.cancelCall)
	private.HandleFunc("GET /approvals", c.approvalsPage)
	private.HandleFunc("POST /approvals/{id}/decide", c.decide)
	private.HandleFunc("GET /audit", c.auditPage)
	private.HandleFunc("GET /turns", c.turnPage)
	private.HandleFunc("GET /turns/{id}", c.turnPage)
	private.HandleFunc("GET /learning", c.learningPage)
	private.HandleFunc("POST /learning/switch", c.switchLearning)
	private.HandleFunc("POST /learning/reset", c.resetLearning)
	mux.Handle("/", c.access.authenticate(private))
	return securityHeaders(mux)
}

// securityHeaders forbids what no page of the console does: scripts and
// styles from anywhere but itself, framing, sniffing content types.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; script-src 'self'; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// pageData is what every page's layout reads.
type pageData struct {
	Title    string
	Operator string
	CSRF     string
	// Section marks the navigation entry of the page.
	Section string
	// Error is shown above the page's content.
	Error string
	// Notice is a message of the action that led to the page.
	Notice string
	// Refresh, when set, takes the browser to this path of the console.
	Refresh string
	Page    any
}

// render writes a page, buffered so that a template error does not leave
// half a page.
func (v *views) render(w http.ResponseWriter, r *http.Request, status int, page string, data pageData) {
	if ses := sessionOf(r.Context()); ses != nil {
		data.Operator, data.CSRF = ses.operator, ses.csrf
		if data.Notice == "" {
			data.Notice = v.sessions.takeNotice(ses)
		}
	}
	var buf bytes.Buffer
	if err := v.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		v.log.Error("render", "page", page, "err", err)
		http.Error(w, "Internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fragment writes one named template without the layout.
func (v *views) fragment(w http.ResponseWriter, page, name string, data any) {
	var buf bytes.Buffer
	if err := v.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		v.log.Error("render", "fragment", name, "err", err)
		http.Error(w, "Internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) busContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// describe turns an error of the bus into a line for the page.
func describe(err error) string {
	var e *messages.Error
	if errors.As(err, &e) {
		return fmt.Sprintf("%s (%s)", e.Message, e.Code)
	}
	return err.Error()
}

// redirect answers a form with a redirect to a page of the console; the
// notice is shown by the session's next page. It travels in the session,
// not in the URL, so that no link can make the console say something.
func (v *views) redirect(w http.ResponseWriter, r *http.Request, path, notice string) {
	if ses := sessionOf(r.Context()); ses != nil && notice != "" {
		v.sessions.setNotice(ses, notice)
	}
	http.Redirect(w, r, path, http.StatusSeeOther)
}
