package messages

import (
	"crypto/rand"
	"fmt"
	"strings"
)

// Routed results.
//
// A client that makes many calls names a route, a token of its own, in its
// submits. The call IDs of those calls start with the route, and the
// events stream republishes each committed result to
// <prefix>.results.<route>.<rest of the call ID>.<namespace>, so one
// subscription to RouteNames.Subject receives the results of all the client's
// calls; the coordinator's answers to quiet submits come on the call's
// RouteNames.CallSubject, under the same route. A routed result whose namespace
// is not that of the called tool was written by another namespace under
// the call's ID, and is ignored. The server
// republishes a result only once it is stored, so a routed copy is always
// the committed result, and it costs the worker no extra message.

// RouteLength is the length of a route: the 22 characters of a NUID.
const RouteLength = 22

// ValidateRoute reports whether route can be a route: exactly RouteLength
// letters and digits.
func ValidateRoute(route string) error {
	if len(route) != RouteLength || !onlyOf(route, "") {
		return &NameError{Kind: "route", Value: route, Reason: fmt.Sprintf("must be exactly %d letters and digits, such as a NUID", RouteLength)}
	}
	return nil
}

// RoutedCallID is the ID of a call made on a route: the route followed by
// a unique suffix of the same length.
func RoutedCallID(route, suffix string) string { return route + suffix }

// ValidateRoutedCallID reports whether id can be the ID of a call on route:
// the route followed by RouteLength letters and digits.
func ValidateRoutedCallID(route, id string) error {
	if len(id) != 2*RouteLength || id[:RouteLength] != route || !onlyOf(id[RouteLength:], "") {
		return &NameError{Kind: "call ID", Value: id, Reason: fmt.Sprintf("a call ID on route %s must be the route followed by %d letters and digits", route, RouteLength)}
	}
	return nil
}

// RouteNames are the subjects of routed results. Get them from
// Names.Routes.
type RouteNames struct {
	prefix string
}

// CallSubject is the subject on which the routed result of a call
// made on a route arrives.
func (n RouteNames) CallSubject(callID string) (string, error) {
	if len(callID) != 2*RouteLength {
		return "", &NameError{Kind: "call ID", Value: callID, Reason: "not the ID of a call made on a route"}
	}
	if err := ValidateRoutedCallID(callID[:RouteLength], callID); err != nil {
		return "", err
	}
	return n.prefix + ".results." + callID[:RouteLength] + "." + callID[RouteLength:], nil
}

// ResultSubject is the subject on which the result of a call made
// on a route arrives, republished by the events stream: CallSubject
// followed by the namespace that wrote it.
func (n RouteNames) ResultSubject(callID, ns string) (string, error) {
	subject, err := n.CallSubject(callID)
	if err != nil {
		return "", err
	}
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return subject + "." + ns, nil
}

// Subject matches the messages of one route: routed results and the
// coordinator's answers to quiet submits.
func (n RouteNames) Subject(route string) (string, error) {
	if err := ValidateRoute(route); err != nil {
		return "", err
	}
	return n.prefix + ".results." + route + ".>", nil
}

// ParseSubject reads a subject under a route: the call ID, and the
// namespace of a routed result ("" for a coordinator's answer). ok is
// false for a subject of another form.
func (n RouteNames) ParseSubject(route, subject string) (callID, ns string, ok bool) {
	// The prefix "<prefix>.results.<route>." matched in its parts, not
	// put together for every message.
	rest, found := strings.CutPrefix(subject, n.prefix)
	for _, part := range [...]string{".results.", route, "."} {
		if !found {
			return "", "", false
		}
		rest, found = strings.CutPrefix(rest, part)
	}
	if !found {
		return "", "", false
	}
	suffix, ns, _ := strings.Cut(rest, ".")
	if suffix == "" || strings.IndexByte(ns, '.') >= 0 {
		return "", "", false
	}
	return route + suffix, ns, true
}

// ParseCallSubject reads a subject of CallSubject's form: the
// call ID on a route it names, or ok false.
func (n RouteNames) ParseCallSubject(subject string) (callID string, ok bool) {
	rest, found := strings.CutPrefix(subject, n.prefix+".results.")
	if !found {
		return "", false
	}
	route, suffix, found := strings.Cut(rest, ".")
	if !found || ValidateRoute(route) != nil || ValidateRoutedCallID(route, route+suffix) != nil {
		return "", false
	}
	return route + suffix, true
}

// RepublishFrom and RepublishTo are the source and destination of the events
// stream's republish rule: a result event's call ID is split after the route, and
// its namespace follows. (The ID of a call made without a route is not
// split, and its copy goes to a subject no route matches.)
func (n RouteNames) RepublishFrom() string {
	return n.prefix + ".events.*.*." + string(EventResult) + ".*"
}

// RepublishTo: see RepublishFrom.
func (n RouteNames) RepublishTo() string {
	return fmt.Sprintf("%s.results.{{SplitFromLeft(2,%d)}}.{{Wildcard(3)}}", n.prefix, RouteLength)
}

// base62 are the characters of RandomToken.
const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// RandomToken returns RouteLength letters and digits drawn from the
// system's cryptographic random source (about 131 bits), to end a call's
// ID (RoutedCallID), make a route, or key a call. Unlike a NUID, whose
// later part counts up, one such token tells nothing of the next: a
// worker that sees the IDs of its own namespace's calls cannot guess
// those of another's, nor of calls still to come.
func RandomToken() string {
	var out [RouteLength]byte
	var buf [2 * RouteLength]byte
	n := 0
	for n < RouteLength {
		_, _ = rand.Read(buf[:])
		for _, b := range buf {
			// 248 is the largest multiple of 62 a byte holds: each
			// character is equally likely.
			if b < 248 && n < RouteLength {
				out[n] = base62[b%62]
				n++
			}
		}
	}
	return string(out[:])
}
