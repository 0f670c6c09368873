package exposure

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolbus/toolbus/internal/support/editdistance"
)

// Workspace layout read by LoadWorkspace.
const (
	BundlesDir = "bundles"
	AgentsDir  = "agents"
)

var (
	bundleKeys   = []string{"id", "title", "description", "iconRef", "iconURI", "priority", "match"}
	ruleKeys     = []string{"name", "exclude", "tier", "alwaysInclude", "approval", "async"}
	approvalKeys = []string{"mode", "title", "message"}
	asyncKeys    = []string{"enabled", "notify", "pollIntervalMs"}
	yamlLine     = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)
)

// LoadWorkspace reads a workspace from fsys: one bundle per file in
// bundles/*.yaml (or .yml), in the shape
//
//	id: catalog
//	title: Catalog
//	match:
//	  - name: "catalog:lookup"
//	    tier: critical
//	  - name: "catalog:help"
//	    tier: onDemand
//	    alwaysInclude: true
//
// and one agent per file in agents/*.yaml (or .yml), whose id and
// tool.bundles / tool.items it reads:
//
//	id: analyst
//	tool:
//	  bundles: [catalog]
//	  items:
//	    - name: "catalog:details"
//	      tier: onDemand
//
// Bundle files and rules are read strictly: an unknown field is an error, as
// a misspelt "alwaysinclude" would otherwise be ignored silently. Agent files
// may hold other fields, which belong to other parts of the system. Missing
// directories mean no bundles or no agents. Every problem is reported as a
// *ValidationError naming the file and, where known, the line; they are
// joined into one error.
func LoadWorkspace(fsys fs.FS) (*Workspace, error) {
	bundleFiles, err := yamlFiles(fsys, BundlesDir)
	if err != nil {
		return nil, err
	}
	agentFiles, err := yamlFiles(fsys, AgentsDir)
	if err != nil {
		return nil, err
	}
	var errs []error
	var bundles []sourced[Bundle]
	for _, file := range bundleFiles {
		b, err := readBundle(fsys, file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		bundles = append(bundles, b)
	}
	var agents []sourced[Agent]
	for _, file := range agentFiles {
		a, err := readAgent(fsys, file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		agents = append(agents, a)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return newWorkspace(bundles, agents)
}

func yamlFiles(fsys fs.FS, dir string) ([]string, error) {
	var files []string
	for _, ext := range []string{"yaml", "yml"} {
		m, err := fs.Glob(fsys, dir+"/*."+ext)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	return files, nil
}

// readDocument parses a file holding exactly one YAML mapping.
func readDocument(fsys fs.FS, file string) (*yaml.Node, error) {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, &ValidationError{File: file, Rule: -1, Reason: err.Error(), Err: err}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, &ValidationError{File: file, Rule: -1, Reason: "file is empty"}
		}
		return nil, yamlError(file, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		return nil, &ValidationError{File: file, Line: next.Line, Rule: -1, Reason: "holds more than one YAML document; want one definition per file"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, &ValidationError{File: file, Line: root.Line, Rule: -1, Reason: "want a YAML mapping at the top of the file"}
	}
	return root, nil
}

// yamlError turns a parser or type error into ValidationErrors with lines.
func yamlError(file string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var errs []error
		for _, msg := range te.Errors {
			errs = append(errs, lineError(file, msg, err))
		}
		return errors.Join(errs...)
	}
	return lineError(file, err.Error(), err)
}

func lineError(file, msg string, err error) *ValidationError {
	e := &ValidationError{File: file, Rule: -1, Reason: msg, Err: err}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Reason = msg[len(m[0]):]
	}
	e.Reason = strings.TrimPrefix(e.Reason, "yaml: ")
	return e
}

// value returns the value node of key in mapping m.
func value(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalar(m *yaml.Node, key string) string {
	if v := value(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// unknownKeys reports the keys of mapping m that are not in allowed.
// agentToolKeys are the keys of an agent's tool section.
var agentToolKeys = []string{"bundles", "items"}

// key returns the key node named name in mapping m, or nil.
func key(m *yaml.Node, name string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			return m.Content[i]
		}
	}
	return nil
}

func unknownKeys(m *yaml.Node, allowed []string, report func(line int, key string)) {
	if m == nil || m.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if !contains(allowed, k.Value) {
			report(k.Line, k.Value)
		}
	}
}

// checkRules checks the keys of a sequence of rules and returns each rule's line.
func checkRules(seq *yaml.Node, newErr func(rule, line int, field, reason string)) []int {
	if seq == nil || seq.Kind != yaml.SequenceNode {
		return nil
	}
	lines := make([]int, len(seq.Content))
	for i, item := range seq.Content {
		lines[i] = item.Line
		if item.Kind != yaml.MappingNode {
			newErr(i, item.Line, "", "want a mapping with at least a name")
			continue
		}
		unknownKeys(item, ruleKeys, func(line int, key string) {
			newErr(i, line, key, fmt.Sprintf("unknown field; want one of %s", strings.Join(ruleKeys, ", ")))
		})
		unknownKeys(value(item, "approval"), approvalKeys, func(line int, key string) {
			newErr(i, line, "approval."+key, fmt.Sprintf("unknown field; want one of %s", strings.Join(approvalKeys, ", ")))
		})
		unknownKeys(value(item, "async"), asyncKeys, func(line int, key string) {
			newErr(i, line, "async."+key, fmt.Sprintf("unknown field; want one of %s", strings.Join(asyncKeys, ", ")))
		})
		// Checked here so that the error names the rule and the values
		// allowed, which the YAML library's type error does not.
		if v := value(item, "alwaysInclude"); v != nil && (v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool") {
			newErr(i, v.Line, "alwaysInclude", fmt.Sprintf("%q is not allowed (in the rule for %q); want true or false", v.Value, scalar(item, "name")))
		}
	}
	return lines
}

func readBundle(fsys fs.FS, file string) (sourced[Bundle], error) {
	root, err := readDocument(fsys, file)
	if err != nil {
		return sourced[Bundle]{}, err
	}
	id := scalar(root, "id")
	var errs []error
	newErr := func(rule, line int, field, reason string) {
		errs = append(errs, &ValidationError{File: file, Line: line, Bundle: id, Rule: rule, Field: field, Reason: reason})
	}
	unknownKeys(root, bundleKeys, func(line int, key string) {
		newErr(-1, line, key, fmt.Sprintf("unknown field; want one of %s", strings.Join(bundleKeys, ", ")))
	})
	src := source{file: file, line: root.Line, ruleLines: checkRules(value(root, "match"), newErr)}
	if len(errs) > 0 {
		return sourced[Bundle]{}, errors.Join(errs...)
	}
	var b Bundle
	if err := root.Decode(&b); err != nil {
		return sourced[Bundle]{}, yamlError(file, err)
	}
	return sourced[Bundle]{v: b, src: src}, nil
}

func readAgent(fsys fs.FS, file string) (sourced[Agent], error) {
	root, err := readDocument(fsys, file)
	if err != nil {
		return sourced[Agent]{}, err
	}
	id := scalar(root, "id")
	var errs []error
	newErr := func(rule, line int, field, reason string) {
		errs = append(errs, &ValidationError{File: file, Line: line, Agent: id, Rule: rule, Field: field, Reason: reason})
	}
	tool := value(root, "tool")
	// An agent's file may hold what else defines the agent, in its tool
	// section too (callExposure, say), so other keys are let be; but a key
	// one or two letters from bundles or items is a misspelling that
	// would leave the agent without its own rules (its exclusions with
	// them).
	var dist editdistance.Rows
	unknownKeys(tool, agentToolKeys, func(line int, k string) {
		for _, want := range agentToolKeys {
			if d := dist.Between(strings.ToLower(k), want); d > 0 && d <= 2 {
				newErr(-1, line, "tool."+k, fmt.Sprintf("unknown field; did you mean %s?", want))
			}
		}
	})
	if tool == nil {
		for _, near := range []string{"tools", "Tool", "Tools"} {
			if k := key(root, near); k != nil {
				newErr(-1, k.Line, near, "unknown field; an agent's bundles and items go under tool:")
			}
		}
	}
	src := source{file: file, line: root.Line, ruleLines: checkRules(value(tool, "items"), newErr)}
	if refs := value(tool, "bundles"); refs != nil && refs.Kind == yaml.SequenceNode {
		for _, r := range refs.Content {
			src.refLines = append(src.refLines, r.Line)
		}
	}
	if len(errs) > 0 {
		return sourced[Agent]{}, errors.Join(errs...)
	}
	var a Agent
	if err := root.Decode(&a); err != nil {
		return sourced[Agent]{}, yamlError(file, err)
	}
	return sourced[Agent]{v: a, src: src}, nil
}
