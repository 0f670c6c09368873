package workerconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources"
	"github.com/toolbus/toolbus/pkg/sources/mcp"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
	"github.com/toolbus/toolbus/pkg/worker"
)

// Config is a worker configuration file.
type Config struct {
	Namespaces []Namespace `yaml:"namespaces"`
	// file and dir locate the file, for messages and relative paths.
	file string
	dir  string
}

// Namespace is one namespace the worker serves.
type Namespace struct {
	Name           string   `yaml:"name"`
	Slots          int      `yaml:"slots"`
	MaxAttempts    int      `yaml:"max_attempts"`
	MaxConcurrency int      `yaml:"max_concurrency"`
	Sources        []Source `yaml:"sources"`
}

// Source is one source of a namespace's tools: exactly one field is set.
type Source struct {
	Demo    bool     `yaml:"demo"`
	MCP     *MCP     `yaml:"mcp"`
	OpenAPI *OpenAPI `yaml:"openapi"`
}

// MCP is an MCP server.
type MCP struct {
	Name string `yaml:"name"`
	// Delivery is the delivery guarantee of the server's tools; Include
	// and Exclude select the tools served; Tools sets each tool's name,
	// title, description, tags and delivery.
	Delivery string                `yaml:"delivery"`
	Include  *Selection            `yaml:"include"`
	Exclude  *Selection            `yaml:"exclude"`
	Tools    map[string]ToolConfig `yaml:"tools"`

	Transport  string            `yaml:"transport"`
	Command    string            `yaml:"command"`
	Args       []string          `yaml:"args"`
	Env        map[string]string `yaml:"env"`
	InheritEnv []string          `yaml:"inherit_env"`
	Dir        string            `yaml:"dir"`
	URL        string            `yaml:"url"`
	Headers    map[string]string `yaml:"headers"`
	Roots      []string          `yaml:"roots"`
}

// OpenAPI is an HTTP API described by an OpenAPI 3 document.
type OpenAPI struct {
	Name    string            `yaml:"name"`
	Spec    string            `yaml:"spec"`
	BaseURL string            `yaml:"base_url"`
	Auth    *Auth             `yaml:"auth"`
	Headers map[string]string `yaml:"headers"`
	// Delivery, Include, Exclude and Tools are as an MCP server's.
	Delivery string                `yaml:"delivery"`
	Include  *Selection            `yaml:"include"`
	Exclude  *Selection            `yaml:"exclude"`
	Tools    map[string]ToolConfig `yaml:"tools"`
}

// Auth names the environment variables holding an API's credentials.
type Auth struct {
	BearerEnv string `yaml:"bearer_env"`
	APIKeyEnv string `yaml:"api_key_env"`
	Header    string `yaml:"header"`
	Query     string `yaml:"query"`
}

// Error is one problem of a configuration file.
type Error struct {
	File string
	// Line is 1-based; 0 when unknown.
	Line int
	// Field is the path of the field at fault, as "namespaces[0].sources[1].mcp.url".
	Field   string
	Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Load reads and checks a configuration file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("worker configuration: %w", err)
	}
	return Parse(path, data)
}

var (
	yamlLine     = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	unknownField = regexp.MustCompile(`^field (.+) not found in type \S+$`)
)

// Parse checks a configuration read from file, whose directory anchors
// relative paths.
func Parse(file string, data []byte) (*Config, error) {
	cfg := &Config{file: file, dir: filepath.Dir(file)}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(file, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Message: "the file is empty: it must list namespaces"}
		}
		return nil, yamlError(file, err)
	}
	if errs := cfg.validate(&root); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// yamlError turns the decoder's errors into Errors with lines.
func yamlError(file string, err error) error {
	var typeErr *yaml.TypeError
	if !errors.As(err, &typeErr) {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return &Error{File: file, Line: line, Message: m[2]}
		}
		return &Error{File: file, Message: strings.TrimPrefix(msg, "yaml: ")}
	}
	var errs []error
	for _, msg := range typeErr.Errors {
		e := &Error{File: file, Message: msg}
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Message = m[2]
		}
		if m := unknownField.FindStringSubmatch(e.Message); m != nil {
			e.Message = fmt.Sprintf("unknown field %q", m[1])
		}
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// validator collects the problems of a configuration.
type validator struct {
	file string
	root *yaml.Node
	errs []error
}

func (v *validator) add(path []any, format string, args ...any) {
	v.errs = append(v.errs, &Error{File: v.file, Line: lineOf(v.root, path), Field: fieldName(path), Message: fmt.Sprintf(format, args...)})
}

func fieldName(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch x := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", x)
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(x)
		}
	}
	return b.String()
}

// lineOf finds the line of the field at path, or of the deepest part of it that exists.
func lineOf(root *yaml.Node, path []any) int {
	n := root
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	for _, p := range path {
		if n == nil {
			break
		}
		var next *yaml.Node
		switch x := p.(type) {
		case int:
			if n.Kind == yaml.SequenceNode && x < len(n.Content) {
				next = n.Content[x]
			}
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == x {
						line = n.Content[i].Line
						next = n.Content[i+1]
					}
				}
			}
		}
		if next == nil {
			break
		}
		n = next
		if line == 0 || n.Kind != yaml.ScalarNode {
			line = n.Line
		}
	}
	return line
}

func (c *Config) validate(root *yaml.Node) []error {
	v := &validator{file: c.file, root: root}
	if len(c.Namespaces) == 0 {
		v.add([]any{"namespaces"}, "list at least one namespace")
	}
	seen := map[string]bool{}
	for i := range c.Namespaces {
		ns := &c.Namespaces[i]
		at := []any{"namespaces", i}
		if err := messages.ValidateNamespace(ns.Name); err != nil {
			v.add(append(at, "name"), "%v", err)
		} else if seen[ns.Name] {
			v.add(append(at, "name"), "namespace %s is listed twice", ns.Name)
		}
		seen[ns.Name] = true
		for _, f := range []struct {
			field string
			n     int
		}{{"slots", ns.Slots}, {"max_attempts", ns.MaxAttempts}, {"max_concurrency", ns.MaxConcurrency}} {
			if f.n < 0 {
				v.add(append(at, f.field), "must be positive (or left out for the default)")
			}
		}
		if len(ns.Sources) == 0 {
			v.add(append(at, "sources"), "list at least one source")
		}
		names := map[string]bool{}
		demos := 0
		for j := range ns.Sources {
			c.validateSource(v, append(at, "sources", j), ns.Name, &ns.Sources[j], names, &demos)
		}
	}
	return v.errs
}

func (c *Config) validateSource(v *validator, at []any, ns string, s *Source, names map[string]bool, demos *int) {
	set := 0
	if s.Demo {
		set++
	}
	if s.MCP != nil {
		set++
	}
	if s.OpenAPI != nil {
		set++
	}
	if set != 1 {
		v.add(at, "a source is exactly one of demo: true, mcp and openapi")
		return
	}
	name := func(field []any, n string) {
		switch {
		case n == "":
			v.add(field, "required")
		case names[n]:
			v.add(field, "another source of the namespace is named %s", n)
		}
		names[n] = true
	}
	switch {
	case s.Demo:
		if *demos++; *demos > 1 {
			v.add(append(at, "demo"), "the demo tools are listed twice")
		}
	case s.MCP != nil:
		m := s.MCP
		at := append(at, "mcp")
		name(append(at, "name"), m.Name)
		transport := m.Transport
		if transport == "" {
			transport = string(mcp.TransportStdio)
			if m.URL != "" && m.Command == "" {
				transport = string(mcp.TransportHTTP)
			}
		}
		switch mcp.Transport(transport) {
		case mcp.TransportStdio:
			if m.Command == "" {
				v.add(append(at, "command"), "the stdio transport needs a command")
			}
			if m.URL != "" {
				v.add(append(at, "url"), "goes with the sse and http transports, not stdio")
			}
			if len(m.Headers) > 0 {
				v.add(append(at, "headers"), "go with the sse and http transports, not stdio")
			}
		case mcp.TransportSSE, mcp.TransportHTTP:
			if m.URL == "" {
				v.add(append(at, "url"), "the %s transport needs a url", transport)
			} else if !strings.HasPrefix(m.URL, "http://") && !strings.HasPrefix(m.URL, "https://") {
				v.add(append(at, "url"), "%q is not an http or https URL", m.URL)
			}
			for _, f := range []struct {
				field string
				set   bool
			}{{"command", m.Command != ""}, {"args", len(m.Args) > 0}, {"env", len(m.Env) > 0}, {"inherit_env", len(m.InheritEnv) > 0}, {"dir", m.Dir != ""}} {
				if f.set {
					v.add(append(at, f.field), "goes with the stdio transport, not %s", transport)
				}
			}
		default:
			v.add(append(at, "transport"), "unknown transport %q: use stdio, sse or http", m.Transport)
		}
		for _, k := range slices.Sorted(maps.Keys(m.Env)) {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				v.add(append(at, "env"), "%q is not an environment variable name", k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
			if !validHeaderName(k) {
				v.add(append(at, "headers"), "%q is not a header name", k)
			}
		}
		for i, r := range m.Roots {
			if r == "" {
				v.add(append(at, "roots", i), "an empty path")
			}
		}
		for i, k := range m.InheritEnv {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				v.add(append(at, "inherit_env", i), "%q is not an environment variable name", k)
			}
		}
		validateTools(v, at, ns, m.Delivery, m.Include, m.Exclude, m.Tools)
	case s.OpenAPI != nil:
		o := s.OpenAPI
		at := append(at, "openapi")
		name(append(at, "name"), o.Name)
		if o.Spec == "" {
			v.add(append(at, "spec"), "required: a file path or an http(s) URL")
		}
		if o.BaseURL != "" && !strings.HasPrefix(o.BaseURL, "http://") && !strings.HasPrefix(o.BaseURL, "https://") {
			v.add(append(at, "base_url"), "%q is not an http or https URL", o.BaseURL)
		}
		for _, k := range slices.Sorted(maps.Keys(o.Headers)) {
			if !validHeaderName(k) {
				v.add(append(at, "headers"), "%q is not a header name", k)
			}
		}
		if o.Auth != nil {
			if err := o.Auth.options().Validate(); err != nil {
				v.add(append(at, "auth"), "%v", err)
			}
		}
		validateTools(v, at, ns, o.Delivery, o.Include, o.Exclude, o.Tools)
	}
}

func (a *Auth) options() openapi.Auth {
	if a == nil {
		return openapi.Auth{}
	}
	return openapi.Auth{BearerEnv: a.BearerEnv, APIKeyEnv: a.APIKeyEnv, Header: a.Header, Query: a.Query}
}

// resolve makes a relative path relative to the configuration's directory.
func (c *Config) resolve(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(c.dir, path)
}

// WorkerNamespaces builds the namespaces the file describes, with their
// sources, ready for worker.Serve. Nothing is started or connected.
func (c *Config) WorkerNamespaces(log *slog.Logger) ([]worker.Namespace, error) {
	if log == nil {
		log = slog.Default()
	}
	var out []worker.Namespace
	for _, ns := range c.Namespaces {
		wns := worker.Namespace{Name: ns.Name, Slots: ns.Slots, MaxAttempts: ns.MaxAttempts, MaxConcurrency: ns.MaxConcurrency}
		for _, s := range ns.Sources {
			switch {
			case s.Demo:
				wns.Tools = append(wns.Tools, demo.Tools()...)
			case s.MCP != nil:
				cfg := c.mcpConfig(ns.Name, s.MCP, log)
				headers, err := c.headers(ns.Name, "mcp", s.MCP.Name, s.MCP.Headers)
				if err != nil {
					return nil, err
				}
				cfg.Headers = headers
				src, err := mcp.New(cfg)
				if err != nil {
					return nil, fmt.Errorf("%s: namespace %s: %w", c.file, ns.Name, err)
				}
				wns.Sources = append(wns.Sources, settingsOf(s.MCP.Delivery, s.MCP.Include, s.MCP.Exclude, s.MCP.Tools).wrap(src, log))
			case s.OpenAPI != nil:
				headers, err := c.headers(ns.Name, "openapi", s.OpenAPI.Name, s.OpenAPI.Headers)
				if err != nil {
					return nil, err
				}
				src, err := openapi.New(openapi.Config{
					Name:      s.OpenAPI.Name,
					Namespace: ns.Name,
					Spec:      c.resolveSpec(s.OpenAPI.Spec),
					BaseURL:   s.OpenAPI.BaseURL,
					Auth:      s.OpenAPI.Auth.options(),
					Headers:   headers,
					Logger:    log,
				})
				if err != nil {
					return nil, fmt.Errorf("%s: namespace %s: %w", c.file, ns.Name, err)
				}
				wns.Sources = append(wns.Sources, settingsOf(s.OpenAPI.Delivery, s.OpenAPI.Include, s.OpenAPI.Exclude, s.OpenAPI.Tools).wrap(src, log))
			}
		}
		out = append(out, wns)
	}
	return out, nil
}

// headers resolves the values of a source's headers: "${NAME}" from the
// environment, "file:<path>" from a file relative to the configuration.
func (c *Config) headers(ns, kind, source string, headers map[string]string) (map[string]string, error) {
	if len(headers) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(headers))
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		v, err := sources.ExpandValue(headers[name], c.dir)
		if err == nil {
			err = sources.CheckHeaderValue(v)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: namespace %s: %s source %s: header %s: %w", c.file, ns, kind, source, name, err)
		}
		out[name] = v
	}
	return out, nil
}

func (c *Config) mcpConfig(ns string, m *MCP, log *slog.Logger) mcp.Config {
	command := m.Command
	if strings.ContainsRune(command, filepath.Separator) || strings.ContainsRune(command, '/') {
		// Absolute, so that neither a cleaned "./server" (which would be
		// looked up in PATH) nor the server's dir changes what runs.
		command = c.resolve(command)
		if abs, err := filepath.Abs(command); err == nil {
			command = abs
		}
	}
	var env []string
	for _, k := range slices.Sorted(maps.Keys(m.Env)) {
		env = append(env, k+"="+m.Env[k])
	}
	var roots []string
	for _, r := range m.Roots {
		if abs, err := filepath.Abs(c.resolve(r)); err == nil {
			r = abs
		}
		roots = append(roots, r)
	}
	return mcp.Config{
		Name:       m.Name,
		Namespace:  ns,
		Transport:  mcp.Transport(m.Transport),
		Command:    command,
		Args:       m.Args,
		Env:        env,
		InheritEnv: m.InheritEnv,
		Dir:        c.resolve(m.Dir),
		URL:        m.URL,
		Headers:    m.Headers,
		Roots:      roots,
		Logger:     log,
	}
}

func (c *Config) resolveSpec(spec string) string {
	if strings.HasPrefix(spec, "http://") || strings.HasPrefix(spec, "https://") {
		return spec
	}
	return c.resolve(spec)
}

// validHeaderName reports whether name is an HTTP field name (a token).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
