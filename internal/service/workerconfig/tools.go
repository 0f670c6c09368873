package workerconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/toolbus/toolbus/internal/support/glob"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// ToolConfig is what a source's configuration says of one of its tools,
// named by the source's name for it or by its method.
type ToolConfig struct {
	// Name renames the tool: its method, the part of its name after the
	// namespace.
	Name string `yaml:"name"`
	// Title and Description replace the source's.
	Title       string `yaml:"title"`
	Description string `yaml:"description"`
	// Tags are added to the source's.
	Tags []string `yaml:"tags"`
	// Delivery is at_least_once or at_most_once (see messages.Delivery).
	Delivery string `yaml:"delivery"`
}

func (t *ToolConfig) empty() bool {
	return t.Name == "" && t.Title == "" && t.Description == "" && len(t.Tags) == 0 && t.Delivery == ""
}

// Selection picks tools of a source: those whose name matches one of Names
// (patterns in which '*' stands for any run of characters) or that carry
// one of Tags.
type Selection struct {
	Names []string `yaml:"names"`
	Tags  []string `yaml:"tags"`
}

// maxTitleLength bounds a configured title, a line of a list.
const maxTitleLength = 256

// validateTools checks what a source's configuration says of its tools:
// its delivery, its include and exclude selections, and each tool's
// settings, in namespace ns.
func validateTools(v *validator, at []any, ns, delivery string, include, exclude *Selection, tools map[string]ToolConfig) {
	if delivery != "" {
		if _, err := messages.ParseDelivery(delivery); err != nil {
			v.add(append(at, "delivery"), "%v", err)
		}
	}
	for _, sel := range []struct {
		key string
		sel *Selection
	}{{"include", include}, {"exclude", exclude}} {
		if sel.sel == nil {
			continue
		}
		if len(sel.sel.Names) == 0 && len(sel.sel.Tags) == 0 {
			v.add(append(at, sel.key), "list names (patterns) or tags, or leave %s out", sel.key)
		}
		for i, n := range sel.sel.Names {
			if strings.TrimSpace(n) == "" {
				v.add(append(at, sel.key, "names", i), "an empty pattern")
			}
		}
		for i, tag := range sel.sel.Tags {
			if err := messages.ValidateLabel("tag", tag); err != nil {
				v.add(append(at, sel.key, "tags", i), "%v", err)
			}
		}
	}
	renamed := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(tools)) {
		tc := tools[name]
		field := append(at, "tools", name)
		switch {
		case name == "":
			v.add(append(at, "tools"), "a tool needs a name")
			continue
		case tc.empty():
			v.add(field, "set at least one of name, title, description, tags and delivery")
		}
		if tc.Delivery != "" {
			if _, err := messages.ParseDelivery(tc.Delivery); err != nil {
				v.add(append(field, "delivery"), "%v", err)
			}
		}
		if tc.Name != "" {
			if err := (messages.ToolName{Namespace: ns, Method: tc.Name}).Validate(); err != nil && ns != "" {
				v.add(append(field, "name"), "%v", err)
			} else if other, taken := renamed[tc.Name]; taken {
				v.add(append(field, "name"), "tools %s and %s are both renamed %s", other, name, tc.Name)
			} else if o, ok := tools[tc.Name]; ok && tc.Name != name && o.Name == "" {
				v.add(append(field, "name"), "tool %s already has the name %s: rename it too, or choose another name", tc.Name, tc.Name)
			}
			renamed[tc.Name] = name
		}
		if tc.Title != "" {
			if len(tc.Title) > maxTitleLength || strings.ContainsFunc(tc.Title, unicode.IsControl) {
				v.add(append(field, "title"), "a title is one line of at most %d bytes", maxTitleLength)
			}
		}
		for i, tag := range tc.Tags {
			if err := messages.ValidateLabel("tag", tag); err != nil {
				v.add(append(field, "tags", i), "%v", err)
			}
		}
	}
}

// toolSettings is what a source's configuration says of its tools: which
// it serves, and how each is named, described, tagged and delivered.
type toolSettings struct {
	delivery         messages.Delivery
	include, exclude *compiledSelection
	tools            map[string]ToolConfig
}

// compiledSelection is a Selection with its patterns compiled.
type compiledSelection struct {
	names    []glob.Glob
	patterns []string
	tags     []string
}

func compileSelection(s *Selection) *compiledSelection {
	if s == nil {
		return nil
	}
	c := &compiledSelection{patterns: s.Names, tags: s.Tags}
	for _, n := range s.Names {
		c.names = append(c.names, glob.Compile(n))
	}
	return c
}

// match reports whether a tool, by its names (the source's name and the
// method the source gives it) and its tags, is selected, and marks in
// used the patterns and tags that matched it.
func (c *compiledSelection) match(names, tags []string, used map[string]bool) bool {
	matched := false
	for i, g := range c.names {
		for _, n := range names {
			if n != "" && g.Match(n) {
				matched, used["names "+c.patterns[i]] = true, true
				break
			}
		}
	}
	for _, tag := range c.tags {
		if slices.Contains(tags, tag) {
			matched, used["tags "+tag] = true, true
		}
	}
	return matched
}

// unused lists, as "names PATTERN" and "tags TAG", what matched no tool.
func (c *compiledSelection) unused(used map[string]bool) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, p := range c.patterns {
		if !used["names "+p] {
			out = append(out, "names "+p)
		}
	}
	for _, tag := range c.tags {
		if !used["tags "+tag] {
			out = append(out, "tags "+tag)
		}
	}
	return out
}

func settingsOf(delivery string, include, exclude *Selection, tools map[string]ToolConfig) toolSettings {
	return toolSettings{delivery: messages.Delivery(delivery), include: compileSelection(include), exclude: compileSelection(exclude), tools: tools}
}

// wrap returns src, or src with the configured settings applied to every
// list of tools it reports when there are any; log hears of what the
// configuration names that src does not list.
func (s toolSettings) wrap(src worker.Source, log *slog.Logger) worker.Source {
	if s.delivery == "" && s.include == nil && s.exclude == nil && len(s.tools) == 0 {
		return src
	}
	if log == nil {
		log = slog.Default()
	}
	wrapped := &configuredSource{Source: src, settings: s, log: log}
	// The worker asks a source whether it is down (an MCP server away);
	// the wrapper must not hide the answer.
	if h, ok := src.(worker.SourceHealth); ok {
		return &configuredHealthSource{configuredSource: wrapped, health: h}
	}
	return wrapped
}

// configuredHealthSource is a configuredSource over a source that tells
// when it cannot serve its tools.
type configuredHealthSource struct {
	*configuredSource
	health worker.SourceHealth
}

func (s *configuredHealthSource) Unavailable() string            { return s.health.Unavailable() }
func (s *configuredHealthSource) HealthChanged() <-chan struct{} { return s.health.HealthChanged() }

// configuredSource is a source whose tools get the configured settings,
// in every list it reports.
type configuredSource struct {
	worker.Source
	settings toolSettings
	log      *slog.Logger
}

// errRenameCollision is matched by the error of a list in which a renamed
// tool takes the name of another tool of the source.
var errRenameCollision = errors.New("a renamed tool takes the name of another tool of the source")

func (s *configuredSource) Start(ctx context.Context, update func([]worker.Tool)) ([]worker.Tool, error) {
	tools, err := s.Source.Start(ctx, func(tools []worker.Tool) {
		out, err := s.apply(tools)
		if err != nil {
			// The renamed tool keeps its name; the other is not served.
			s.log.Error("tool not served: the configuration renames another tool of the source to its name", "source", s.Name(), "error", err)
		}
		update(out)
	})
	if err != nil {
		return nil, err
	}
	out, err := s.apply(tools)
	if err != nil {
		// The worker stops only the sources whose start succeeded.
		_ = s.Source.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return out, nil
}

// apply returns the tools the configuration keeps, with its settings. A
// renamed tool that takes the name of a tool the source names so is
// reported with errRenameCollision; the list returned leaves that other
// tool out.
func (s *configuredSource) apply(tools []worker.Tool) ([]worker.Tool, error) {
	if tools == nil {
		return nil, nil
	}
	st := &s.settings
	out := make([]worker.Tool, 0, len(tools))
	used := map[string]bool{}
	configured := map[string]string{} // tools' keys that name a listed tool → why it is not served, or ""
	renamed := map[string]string{}
	var byConfig []bool
	for _, t := range tools {
		def := t.Definition
		sourceName := def.OriginalName
		if sourceName == "" {
			sourceName = def.Method
		}
		names := []string{sourceName, def.Method}
		key, tc, ok := s.toolConfig(&def)
		tags := slices.Clone(def.Metadata.Tags)
		if ok {
			for _, tag := range tc.Tags {
				if !slices.Contains(tags, tag) {
					tags = append(tags, tag)
				}
			}
		}
		included := st.include == nil || st.include.match(names, tags, used)
		excluded := st.exclude != nil && st.exclude.match(names, tags, used)
		if ok {
			configured[key] = ""
		}
		if !included || excluded {
			if ok {
				configured[key] = "include and exclude leave it out"
			}
			continue
		}
		wasRenamed := false
		if ok {
			if tc.Name != "" && tc.Name != def.Method {
				wasRenamed = true
				def.Method, def.Name = tc.Name, ""
				def.OriginalName = sourceName
				renamed[tc.Name] = sourceName
				if sourceName == tc.Name {
					def.OriginalName = ""
				}
			}
			if tc.Title != "" {
				def.Title = tc.Title
			}
			if tc.Description != "" {
				def.Description = tc.Description
			}
			def.Metadata.Tags = tags
			if tc.Delivery != "" {
				def.Delivery = messages.Delivery(tc.Delivery)
			}
		}
		if !ok || tc.Delivery == "" {
			if st.delivery != "" {
				def.Delivery = st.delivery
			}
		}
		t.Definition = def
		out = append(out, t)
		byConfig = append(byConfig, wasRenamed)
	}
	for _, name := range slices.Sorted(maps.Keys(st.tools)) {
		why, listed := configured[name]
		switch {
		case !listed:
			s.log.Warn("the configuration names a tool the source does not list", "source", s.Name(), "tool", name)
		case why != "":
			s.log.Warn("the configuration sets a tool it does not serve", "source", s.Name(), "tool", name, "reason", why)
		}
	}
	for _, sel := range []struct {
		key string
		sel *compiledSelection
	}{{"include", st.include}, {"exclude", st.exclude}} {
		for _, what := range sel.sel.unused(used) {
			s.log.Warn("a selection of the configuration matches no tool the source lists", "source", s.Name(), sel.key, what)
		}
	}
	if len(tools) > 0 && len(out) == 0 {
		s.log.Error("the source serves no tool: include and exclude leave out every tool it lists", "source", s.Name(), "listed", len(tools))
	}
	return dropRenameCollisions(out, byConfig, renamed)
}

// toolConfig is the configuration of a tool, named by its method or, when
// no entry names that, by the source's name for it; key is the entry's.
func (s *configuredSource) toolConfig(def *messages.ToolDefinition) (key string, tc ToolConfig, ok bool) {
	if tc, ok := s.settings.tools[def.Method]; ok {
		return def.Method, tc, true
	}
	if def.OriginalName != "" {
		if tc, ok := s.settings.tools[def.OriginalName]; ok {
			return def.OriginalName, tc, true
		}
	}
	return "", ToolConfig{}, false
}

// dropRenameCollisions leaves out of tools each tool that the
// configuration did not rename (byConfig[i] is false) and whose method a
// renamed tool took (renamed maps the new methods to the source's names),
// and reports them.
func dropRenameCollisions(tools []worker.Tool, byConfig []bool, renamed map[string]string) ([]worker.Tool, error) {
	if len(renamed) == 0 {
		return tools, nil
	}
	var errs []error
	out := tools[:0:0]
	for i, t := range tools {
		if from, taken := renamed[t.Definition.Method]; taken && !byConfig[i] {
			errs = append(errs, fmt.Errorf("%w: %s is renamed %s, the name of another tool it lists", errRenameCollision, from, t.Definition.Method))
			continue
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}
