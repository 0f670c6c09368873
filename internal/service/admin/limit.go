package admin

import (
	"net"
	"sync"
	"time"
)

// Bounds of failed logins: a client address may fail maxLoginFailures
// times in loginFailureWindow, then is answered 429 until the window
// ends. At most maxLoginClients addresses are remembered; beyond, the
// memory starts anew.
const (
	maxLoginFailures   = 10
	loginFailureWindow = time.Minute
	maxLoginClients    = 10000
)

// loginLimiter counts failed logins per client address.
type loginLimiter struct {
	now func() time.Time

	mu       sync.Mutex
	failures map[string]*loginFailures
}

type loginFailures struct {
	since time.Time
	count int
}

func newLoginLimiter() *loginLimiter {
	return &loginLimiter{now: time.Now, failures: map[string]*loginFailures{}}
}

// host is the address a limit applies to: the client's IP, without its port.
func host(remoteAddr string) string {
	h, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return h
}

// allowed reports whether the address may try to log in now.
func (l *loginLimiter) allowed(remoteAddr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.failures[host(remoteAddr)]
	if !ok || l.now().Sub(f.since) >= loginFailureWindow {
		return true
	}
	return f.count < maxLoginFailures
}

// failed counts a failed login of the address.
func (l *loginLimiter) failed(remoteAddr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	h := host(remoteAddr)
	f, ok := l.failures[h]
	if !ok || now.Sub(f.since) >= loginFailureWindow {
		if len(l.failures) >= maxLoginClients {
			l.failures = map[string]*loginFailures{}
		}
		f = &loginFailures{since: now}
		l.failures[h] = f
	}
	f.count++
}
