package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolbus/toolbus/pkg/worker"
)

// call sends one operation's request and maps its response.
func (s *Source) call(ctx context.Context, op *operation, call *worker.Call) (*worker.Result, error) {
	req, err := s.request(ctx, op, call.Arguments)
	if err != nil {
		return nil, err
	}
	shown := s.shown(req.URL)
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		// The client's error quotes the URL it was sent to.
		if urlErr := (*url.Error)(nil); errors.As(err, &urlErr) {
			urlErr.URL = s.shownText(urlErr.URL)
		}
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			// Nothing reached the server: another attempt is safe.
			return nil, worker.Retry(fmt.Errorf("%s %s: %w", op.method, shown, err))
		}
		return nil, fmt.Errorf("%s %s: %w", op.method, shown, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseSize+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("%s %s: reading the response: %w", op.method, shown, err)
	}
	if int64(len(body)) > s.cfg.MaxResponseSize {
		return nil, fmt.Errorf("%s %s: the response is larger than %d bytes", op.method, shown, s.cfg.MaxResponseSize)
	}
	return toResult(resp, body, s.shown(resp.Request.URL)), nil
}

// shown is a request's URL as results, errors and logs show it, which the
// agent and its model read: without a password, and with the API key
// masked when it goes in the query.
func (s *Source) shown(u *url.URL) string {
	if s.cfg.Auth.Query == "" || u.RawQuery == "" {
		return u.Redacted()
	}
	c := *u
	parts := strings.Split(c.RawQuery, "&")
	for i, part := range parts {
		k, _, _ := strings.Cut(part, "=")
		if key, err := url.QueryUnescape(k); err == nil && key == s.cfg.Auth.Query {
			parts[i] = k + "=xxxxx"
		}
	}
	c.RawQuery = strings.Join(parts, "&")
	return c.Redacted()
}

// shownText is shown for a URL the HTTP client's error quotes as text; one
// that does not parse is not shown at all.
func (s *Source) shownText(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return s.shown(u)
}

// request builds the HTTP request of a call from its arguments.
func (s *Source) request(ctx context.Context, op *operation, raw []byte) (*http.Request, error) {
	p, err := placeArguments(op, raw)
	if err != nil {
		return nil, err
	}
	if s.cfg.Auth.Query != "" {
		p.query = append(p.query, url.QueryEscape(s.cfg.Auth.Query)+"="+url.QueryEscape(s.credential))
	}
	reader, err := p.bodyReader(op.bodyType)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, op.method, s.target(p), reader)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op.method, op.path, err)
	}
	s.setHeaders(req, op, p)
	return req, nil
}

// requestParts are a call's arguments, each where its operation sends it:
// the path, the query, a header, a cookie or the body.
type requestParts struct {
	path    string
	query   []string
	header  http.Header
	cookies []string
	// bodyFields are the properties of a JSON body, body a body given
	// whole.
	bodyFields         map[string]any
	body               any
	hasBody, wholeBody bool
}

// placeArguments reads a call's arguments, a JSON object, and places each.
func placeArguments(op *operation, raw []byte) (*requestParts, error) {
	args := map[string]any{}
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&args); err != nil {
			return nil, fmt.Errorf("arguments are not a JSON object: %w", err)
		}
	}
	p := &requestParts{path: op.path, header: http.Header{}, bodyFields: map[string]any{}}
	for _, a := range op.args {
		v, ok := args[a.property]
		// A JSON null is a value of a JSON body, sent as given; a parameter
		// has no way to say null, so a null one is left out.
		if !ok || v == nil && (a.in != inBody && (a.in != inBodyWhole || !isJSON(op.bodyType))) {
			if a.in == inPath {
				return nil, fmt.Errorf("argument %q (%s) is missing", a.property, locationLabel(a.in, a.name))
			}
			continue
		}
		if err := p.place(a, v); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// place puts argument a's value v where a goes, serialized as its
// parameter says.
func (p *requestParts) place(a argument, v any) error {
	switch a.in {
	case inBody:
		p.bodyFields[a.name] = v
		p.hasBody = true
		return nil
	case inBodyWhole:
		p.body = v
		p.hasBody, p.wholeBody = true, true
		return nil
	}
	if a.param.Schema == nil && len(a.param.Content) > 0 {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("argument %q: %w", a.property, err)
		}
		v = string(data)
	}
	method, err := a.param.SerializationMethod()
	if err != nil {
		return err
	}
	switch a.in {
	case inPath:
		value, err := pathValue(a.name, v, method)
		if err != nil {
			return fmt.Errorf("argument %q: %w", a.property, err)
		}
		p.path = strings.ReplaceAll(p.path, "{"+a.name+"}", value)
	case inQuery:
		pairs, err := queryPairs(a.name, v, method, a.param.AllowReserved)
		if err != nil {
			return fmt.Errorf("argument %q: %w", a.property, err)
		}
		p.query = append(p.query, pairs...)
	case inHeader:
		value, err := simpleValue(v, method.Explode, false)
		if err != nil {
			return fmt.Errorf("argument %q: %w", a.property, err)
		}
		p.header.Set(a.name, value)
	case inCookie:
		value, err := simpleValue(v, method.Explode, false)
		if err != nil {
			return fmt.Errorf("argument %q: %w", a.property, err)
		}
		p.cookies = append(p.cookies, a.name+"="+value)
	}
	return nil
}

// bodyReader is the request's body, nil without one: a JSON object of the
// body's fields, or the body given whole, as JSON or, for another media
// type, as the string it must be.
func (p *requestParts) bodyReader(bodyType string) (io.Reader, error) {
	if !p.hasBody {
		return nil, nil
	}
	var data []byte
	switch {
	case p.wholeBody && !isJSON(bodyType):
		text, ok := p.body.(string)
		if !ok {
			return nil, fmt.Errorf("the request body is %s and must be given as a string", bodyType)
		}
		data = []byte(text)
	case p.wholeBody:
		var err error
		if data, err = json.Marshal(p.body); err != nil {
			return nil, fmt.Errorf("request body: %w", err)
		}
	default:
		var err error
		if data, err = json.Marshal(p.bodyFields); err != nil {
			return nil, fmt.Errorf("request body: %w", err)
		}
	}
	return bytes.NewReader(data), nil
}

// target is the request's URL: the base URL's, then the operation's path
// and the base URL's query before the call's.
func (s *Source) target(p *requestParts) string {
	query := p.query
	origin := *s.base
	origin.Path, origin.RawPath, origin.RawQuery, origin.Fragment = "", "", "", ""
	target := origin.String() + s.base.EscapedPath() + escapedTemplate(p.path)
	if s.base.RawQuery != "" {
		query = append([]string{s.base.RawQuery}, query...)
	}
	if len(query) > 0 {
		target += "?" + strings.Join(query, "&")
	}
	return target
}

// setHeaders sets the request's headers: the configured ones, the call's
// header and cookie arguments, the body's type, and the credential.
func (s *Source) setHeaders(req *http.Request, op *operation, p *requestParts) {
	for name, value := range s.cfg.Headers {
		req.Header.Set(name, value)
	}
	for name, values := range p.header {
		req.Header[name] = values
	}
	if len(p.cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(p.cookies, "; "))
	}
	if p.hasBody {
		req.Header.Set("Content-Type", op.bodyType)
	}
	req.Header.Set("Accept", "application/json, */*;q=0.8")
	switch {
	case s.cfg.Auth.BearerEnv != "":
		req.Header.Set("Authorization", "Bearer "+s.credential)
	case s.cfg.Auth.Header != "":
		req.Header.Set(s.cfg.Auth.Header, s.credential)
	}
}

// escapedTemplate returns a path whose parameters are already escaped, as
// the raw path: only what is outside the substituted values still needs
// escaping, and the values' own escapes must survive.
func escapedTemplate(path string) string {
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' || isUnreserved(c) || strings.IndexByte("/!$&'()*+,;=:@", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// escapeUnreserved escapes everything but the unreserved characters, as
// the value of a path segment or a query parameter must be.
func escapeUnreserved(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isUnreserved(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// scalar writes a primitive argument as text.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		if x {
			return "true", nil
		}
		return "false", nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("a %T cannot be sent as a single value", v)
}

// pairsOf lists an object's members sorted by name, as scalars.
func pairsOf(m map[string]any) ([][2]string, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([][2]string, 0, len(keys))
	for _, k := range keys {
		v, err := scalar(m[k])
		if err != nil {
			return nil, fmt.Errorf("member %q: %w", k, err)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

func scalars(list []any) ([]string, error) {
	out := make([]string, len(list))
	for i, item := range list {
		v, err := scalar(item)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

// simpleValue writes a value in the simple style; with escape each part is
// escaped for a path segment while the separators stay literal.
func simpleValue(v any, explode, escape bool) (string, error) {
	esc := func(s string) string {
		if escape {
			return escapeUnreserved(s)
		}
		return s
	}
	switch x := v.(type) {
	case []any:
		items, err := scalars(x)
		if err != nil {
			return "", err
		}
		for i := range items {
			items[i] = esc(items[i])
		}
		return strings.Join(items, ","), nil
	case map[string]any:
		pairs, err := pairsOf(x)
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, 2*len(pairs))
		for _, p := range pairs {
			if explode {
				parts = append(parts, esc(p[0])+"="+esc(p[1]))
			} else {
				parts = append(parts, esc(p[0]), esc(p[1]))
			}
		}
		return strings.Join(parts, ","), nil
	}
	s, err := scalar(v)
	return esc(s), err
}

// pathValue writes a path parameter in its style (simple, label or matrix), escaped.
func pathValue(name string, v any, method *openapi3.SerializationMethod) (string, error) {
	switch method.Style {
	case openapi3.SerializationSimple:
		return simpleValue(v, method.Explode, true)
	case openapi3.SerializationLabel:
		value, err := simpleValue(v, method.Explode, true)
		if err != nil {
			return "", err
		}
		if _, isList := v.([]any); isList && method.Explode {
			value = strings.ReplaceAll(value, ",", ".")
		}
		return "." + value, nil
	case openapi3.SerializationMatrix:
		pairs, err := queryPairs(name, v, &openapi3.SerializationMethod{Style: openapi3.SerializationForm, Explode: method.Explode}, false)
		if err != nil {
			return "", err
		}
		return ";" + strings.Join(pairs, ";"), nil
	}
	return "", fmt.Errorf("path style %q is not supported", method.Style)
}

// queryPairs writes a query parameter as escaped name=value pairs in its
// style: form (exploded arrays repeat the name), spaceDelimited,
// pipeDelimited or deepObject.
func queryPairs(name string, v any, method *openapi3.SerializationMethod, allowReserved bool) ([]string, error) {
	esc := escapeUnreserved
	if allowReserved {
		esc = func(s string) string { return escapedTemplate(strings.ReplaceAll(s, "%", "%25")) }
	}
	key := escapeUnreserved(name)
	switch x := v.(type) {
	case []any:
		items, err := scalars(x)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return nil, nil
		}
		for i := range items {
			items[i] = esc(items[i])
		}
		if method.Explode && method.Style == openapi3.SerializationForm {
			out := make([]string, len(items))
			for i, item := range items {
				out[i] = key + "=" + item
			}
			return out, nil
		}
		sep := ","
		switch method.Style {
		case openapi3.SerializationSpaceDelimited:
			sep = "%20"
		case openapi3.SerializationPipeDelimited:
			sep = "%7C"
		case openapi3.SerializationForm:
		default:
			return nil, fmt.Errorf("query style %q does not apply to arrays", method.Style)
		}
		return []string{key + "=" + strings.Join(items, sep)}, nil
	case map[string]any:
		pairs, err := pairsOf(x)
		if err != nil {
			return nil, err
		}
		var out []string
		switch {
		case method.Style == openapi3.SerializationDeepObject:
			for _, p := range pairs {
				out = append(out, key+"%5B"+escapeUnreserved(p[0])+"%5D="+esc(p[1]))
			}
		case method.Style == openapi3.SerializationForm && method.Explode:
			for _, p := range pairs {
				out = append(out, escapeUnreserved(p[0])+"="+esc(p[1]))
			}
		case method.Style == openapi3.SerializationForm:
			parts := make([]string, 0, 2*len(pairs))
			for _, p := range pairs {
				parts = append(parts, esc(p[0]), esc(p[1]))
			}
			out = []string{key + "=" + strings.Join(parts, ",")}
		default:
			return nil, fmt.Errorf("query style %q does not apply to objects", method.Style)
		}
		return out, nil
	}
	s, err := scalar(v)
	if err != nil {
		return nil, err
	}
	return []string{key + "=" + esc(s)}, nil
}
