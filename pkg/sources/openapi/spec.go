package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources"
	"github.com/toolbus/toolbus/pkg/worker"
)

// load reads and validates the document at a path or URL, converting a
// Swagger 2.0 document to OpenAPI 3 first. specURL is set when the document
// came from a URL. The order is the declaration order of the schemas'
// properties, read from every file the document is made of.
func load(ctx context.Context, spec string, client *http.Client, limits loadLimits) (*openapi3.T, *url.URL, *propertyOrder, error) {
	ctx, cancel := context.WithTimeout(ctx, limits.timeout)
	defer cancel()
	order := &propertyOrder{}
	size := &documentSize{limit: limits.size}
	read := openapi3.URIMapCache(openapi3.ReadFromURIs(readFromHTTP(ctx, client, size), readFromFile(size)))
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	loader.Context = ctx
	loader.ReadFromURIFunc = func(l *openapi3.Loader, location *url.URL) ([]byte, error) {
		data, err := read(l, location)
		if err == nil {
			order.learn(data)
		}
		return data, err
	}
	var (
		location *url.URL
		specURL  *url.URL
	)
	if u, perr := url.Parse(spec); perr == nil && (u.Scheme == "http" || u.Scheme == "https") {
		location, specURL = u, u
	} else {
		location = &url.URL{Path: filepath.ToSlash(spec)}
	}
	data, err := loader.ReadFromURIFunc(loader, location)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load spec %s: %w", spec, err)
	}
	var doc *openapi3.T
	if version := swaggerVersion(data); version != "" {
		if version != "2.0" {
			return nil, nil, nil, fmt.Errorf("load spec %s: Swagger version %q is not supported: use 2.0 or OpenAPI 3", spec, version)
		}
		var doc2 openapi2.T
		if err := openapi2.UnmarshalFromData(data, &doc2); err != nil {
			return nil, nil, nil, fmt.Errorf("load spec %s: %w", spec, err)
		}
		if doc, err = openapi2conv.ToV3WithLoader(&doc2, loader, location); err != nil {
			return nil, nil, nil, fmt.Errorf("load spec %s: converting Swagger 2.0 to OpenAPI 3: %w", spec, err)
		}
	} else if doc, err = loader.LoadFromDataWithPath(data, location); err != nil {
		return nil, nil, nil, fmt.Errorf("load spec %s: %w", spec, err)
	}
	if err := doc.Validate(ctx, openapi3.DisableExamplesValidation(), openapi3.DisableSchemaDefaultsValidation()); err != nil {
		return nil, nil, nil, fmt.Errorf("spec %s is not valid: %w", spec, err)
	}
	return doc, specURL, order, nil
}

// loadLimits bound what loading a document may cost.
type loadLimits struct {
	// timeout bounds reading every file and URL of the document.
	timeout time.Duration
	// size bounds the bytes of all of them together.
	size int64
}

// documentSize counts the bytes read for one document, across the files
// and URLs its references lead to.
type documentSize struct {
	mu    sync.Mutex
	limit int64
	read  int64
}

// add counts n more bytes read from location, failing past the limit.
func (d *documentSize) add(location *url.URL, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.read += n
	if d.read > d.limit {
		return fmt.Errorf("%s: the document is larger than %d bytes (with the files it refers to)", location.Redacted(), d.limit)
	}
	return nil
}

// readAll reads r up to what is left of the size limit.
func (d *documentSize) readAll(location *url.URL, r io.Reader) ([]byte, error) {
	d.mu.Lock()
	left := d.limit - d.read
	d.mu.Unlock()
	data, err := io.ReadAll(io.LimitReader(r, max(left, 0)+1))
	if err != nil {
		return nil, err
	}
	if err := d.add(location, int64(len(data))); err != nil {
		return nil, err
	}
	return data, nil
}

// readFromHTTP reads a document from an http(s) URL within ctx and the
// size limit; the loader's own reader has neither.
func readFromHTTP(ctx context.Context, client *http.Client, size *documentSize) openapi3.ReadFromURIFunc {
	return func(_ *openapi3.Loader, location *url.URL) ([]byte, error) {
		if location.Scheme == "" || location.Host == "" {
			return nil, openapi3.ErrURINotSupported
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, location.String(), nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%s: not read within the time allowed: %w", location.Redacted(), context.Cause(ctx))
			}
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode > 399 {
			return nil, fmt.Errorf("%s: %s", location.Redacted(), resp.Status)
		}
		data, err := size.readAll(location, resp.Body)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%s: not read within the time allowed: %w", location.Redacted(), context.Cause(ctx))
		}
		return data, err
	}
}

// readFromFile reads a document from a file within the size limit.
func readFromFile(size *documentSize) openapi3.ReadFromURIFunc {
	return func(_ *openapi3.Loader, location *url.URL) ([]byte, error) {
		if location.Path == "" || location.Host != "" || (location.Scheme != "" && location.Scheme != "file") {
			return nil, openapi3.ErrURINotSupported
		}
		f, err := os.Open(filepath.Clean(filepath.FromSlash(location.Path)))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return size.readAll(location, f)
	}
}

// swaggerVersion returns the value of a document's top-level "swagger"
// field, "" for an OpenAPI 3 document (or one that does not parse, which
// the OpenAPI loader then explains).
func swaggerVersion(data []byte) string {
	var head struct {
		Swagger any `yaml:"swagger"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil || head.Swagger == nil {
		return ""
	}
	return fmt.Sprint(head.Swagger)
}

// baseURL picks where requests go: the configured URL, else the document's
// first server.
func baseURL(configured string, doc *openapi3.T, specURL *url.URL) (*url.URL, error) {
	raw := configured
	if raw == "" {
		if len(doc.Servers) == 0 || doc.Servers[0] == nil {
			return nil, fmt.Errorf("the spec names no server: set a base URL")
		}
		srv := doc.Servers[0]
		raw = srv.URL
		for name, v := range srv.Variables {
			raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("base URL %q: %w", raw, err)
	}
	if !u.IsAbs() {
		if specURL == nil {
			return nil, fmt.Errorf("the spec's server URL %q is relative and the spec is a file: set a base URL", raw)
		}
		u = specURL.ResolveReference(u)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// Where an argument goes in the request.
const (
	inPath      = openapi3.ParameterInPath
	inQuery     = openapi3.ParameterInQuery
	inHeader    = openapi3.ParameterInHeader
	inCookie    = openapi3.ParameterInCookie
	inBody      = "body" // one property of an object body
	inBodyWhole = "body_whole"
)

// argument is one property of a tool's input schema and where it goes.
type argument struct {
	property string // name in the input schema
	in       string
	name     string // name in the request: the parameter or body property
	param    *openapi3.Parameter
}

// operation is what a call needs to build its request.
type operation struct {
	method, path string
	args         []argument
	// bodyType is the media type of the request body, "" when there is none.
	bodyType string
}

var methodOrder = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions, http.MethodTrace}

// tools turns every operation of the document into a tool.
func (s *Source) tools(doc *openapi3.T, order *propertyOrder) ([]worker.Tool, error) {
	type entry struct {
		original, method, path string
		synthesized            bool
		op                     *openapi3.Operation
		item                   *openapi3.PathItem
	}
	var entries []*entry
	var paths []string
	if doc.Paths != nil {
		paths = doc.Paths.Keys()
	}
	slices.Sort(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		ops := item.Operations()
		for _, method := range methodOrder {
			op := ops[method]
			if op == nil {
				continue
			}
			e := &entry{original: op.OperationID, method: method, path: path, op: op, item: item}
			if e.original == "" {
				e.original, e.synthesized = synthesizedName(method, path), true
			}
			entries = append(entries, e)
		}
	}
	// A synthesized name shared by two operations falls back to "METHOD /path".
	count := map[string]int{}
	for _, e := range entries {
		count[e.original]++
	}
	for _, e := range entries {
		if e.synthesized && count[e.original] > 1 {
			e.original = e.method + " " + e.path
		}
	}
	names := make([]string, len(entries))
	seen := map[string]string{}
	for i, e := range entries {
		if other, dup := seen[e.original]; dup {
			return nil, fmt.Errorf("operations %s and %s %s share the name %q", other, e.method, e.path, e.original)
		}
		seen[e.original] = e.method + " " + e.path
		names[i] = e.original
	}
	methods := sources.Methods(s.cfg.Namespace, names)
	tools := make([]worker.Tool, 0, len(entries))
	skipped := 0
	for _, e := range entries {
		op, schema, err := buildOperation(e.method, e.path, e.item, e.op, order)
		if errors.Is(err, errSchemaTooLarge) {
			// One operation the coordinator could not validate calls of
			// leaves the API's other operations served.
			skipped++
			s.log.Warn("operation skipped: it is not served as a tool", "tool", s.cfg.Namespace+"-"+methods[e.original],
				"operation", e.method+" "+e.path, "reason", strings.TrimPrefix(err.Error(), errSchemaTooLarge.Error()+": "))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", e.method, e.path, err)
		}
		def := messages.ToolDefinition{
			Method:       methods[e.original],
			Description:  describe(e.op, e.method, e.path),
			InputSchema:  schema,
			OutputSchema: outputSchema(e.op, order),
			Metadata: messages.ToolMetadata{
				Tags:  tagsFor(e.method),
				Extra: map[string]string{"http_method": e.method, "http_path": e.path},
			},
			Delivery: deliveryFor(e.method),
			Source:   messages.ToolSource{Kind: messages.SourceOpenAPI, Name: s.cfg.Name},
		}
		switch {
		case e.synthesized:
			def.OriginalName = e.method + " " + e.path
		case def.Method != e.original:
			def.OriginalName = e.original
		}
		tools = append(tools, worker.Tool{Definition: def, Handler: worker.HandlerFunc(func(ctx context.Context, call *worker.Call) (*worker.Result, error) {
			return s.call(ctx, op, call)
		})})
	}
	if skipped > 0 && len(tools) == 0 {
		s.log.Error("the API serves no tool: every operation was skipped", "skipped", skipped)
	}
	slices.SortFunc(tools, func(a, b worker.Tool) int { return strings.Compare(a.Definition.Method, b.Definition.Method) })
	return tools, nil
}

// synthesizedName names an operation without an operationId:
// "GET /pets/{petId}" is "get_pets_petId".
func synthesizedName(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	sep := true
	for _, c := range path {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			if sep {
				b.WriteByte('_')
			}
			b.WriteRune(c)
			sep = false
		} else {
			sep = true
		}
	}
	return b.String()
}

func describe(op *openapi3.Operation, method, path string) string {
	parts := []string{}
	if s := strings.TrimSpace(op.Summary); s != "" {
		parts = append(parts, s)
	}
	if d := strings.TrimSpace(op.Description); d != "" && d != strings.TrimSpace(op.Summary) {
		parts = append(parts, d)
	}
	if len(parts) == 0 {
		parts = append(parts, method+" "+path)
	}
	if op.Deprecated {
		parts = append(parts, "Deprecated.")
	}
	return strings.Join(parts, "\n\n")
}

func tagsFor(method string) []string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return []string{messages.TagReadOnly, messages.TagNetwork}
	case http.MethodDelete:
		return []string{messages.TagDestructive, messages.TagNetwork}
	}
	return []string{messages.TagNetwork}
}

// deliveryFor is the guarantee an operation's method allows. HTTP
// (RFC 9110, 9.2.2) makes GET, HEAD, OPTIONS, TRACE, PUT and DELETE
// idempotent: a repeat has no effect beyond the first's. POST and PATCH
// are not: a request sent again after its worker died may create or
// change twice, so they are at most once. PUT is at least once: a repeat
// stores the same representation again. DELETE stays at most once,
// though idempotent: its repeat after the first succeeded answers 404,
// which would report a deletion that happened as a failure, and what the
// URL names may have been created anew in between, which the repeat would
// delete.
func deliveryFor(method string) messages.Delivery {
	switch method {
	case http.MethodPost, http.MethodPatch, http.MethodDelete:
		return messages.DeliveryAtMostOnce
	}
	return messages.DeliveryAtLeastOnce
}

// locationLabel says in words where an argument goes, for descriptions and errors.
func locationLabel(in, name string) string {
	switch in {
	case inBody:
		return fmt.Sprintf("the body property %q", name)
	case inBodyWhole:
		return "the request body"
	}
	return fmt.Sprintf("the %s parameter %q", in, name)
}

// buildOperation collects an operation's arguments and its input schema,
// whose properties come in the order path, query, header, cookie, body, and
// the body's in their declaration order.
func buildOperation(method, path string, item *openapi3.PathItem, op *openapi3.Operation, order *propertyOrder) (*operation, messages.JSON, error) {
	b := &inputSchema{
		op:         &operation{method: method, path: path},
		properties: orderedObject{values: map[string]any{}},
		order:      order,
		budget:     newSchemaBudget(),
		owner:      map[string]string{},
	}
	for _, in := range []string{inPath, inQuery, inHeader, inCookie} {
		for _, p := range parameters(item, op) {
			if p.In == in {
				b.parameter(p)
			}
		}
	}
	if op.RequestBody != nil && op.RequestBody.Value != nil {
		b.body(op.RequestBody.Value)
	}
	data, err := b.marshal()
	if err != nil {
		return nil, nil, err
	}
	return b.op, data, nil
}

// inputSchema is an operation's input schema in the making, with the
// arguments its properties stand for.
type inputSchema struct {
	op         *operation
	properties orderedObject
	required   []string
	order      *propertyOrder
	budget     *schemaBudget
	// owner maps a property to what it holds, for the descriptions of
	// renamed ones.
	owner map[string]string
}

// parameter adds a parameter of the path, the query, a header or a cookie.
func (b *inputSchema) parameter(p *openapi3.Parameter) {
	var schema any
	switch {
	case p.Schema != nil:
		schema = jsonSchema(p.Schema, b.order, b.budget)
	case len(p.Content) > 0:
		for _, mt := range p.Content {
			schema = jsonSchema(mt.Schema, b.order, b.budget)
			break
		}
	default:
		schema = map[string]any{"type": "string"}
	}
	b.add(argument{in: p.In, name: p.Name, param: p}, schema, p.Description, p.Required || p.In == inPath)
}

// body adds the request body: each property of a JSON object, or else the
// body whole, as one property.
func (b *inputSchema) body(body *openapi3.RequestBody) {
	mediaType, mt := pickBody(body.Content)
	if mediaType == "" {
		return
	}
	b.op.bodyType = mediaType
	if isJSON(mediaType) && mt != nil && isObject(mt.Schema) {
		object := mt.Schema.Value
		bodyRequired := map[string]bool{}
		for _, r := range object.Required {
			bodyRequired[r] = true
		}
		for _, name := range b.order.of(object.Properties) {
			ref := object.Properties[name]
			if ref != nil && ref.Value != nil && ref.Value.ReadOnly {
				continue // the server sets it; a request does not carry it
			}
			b.add(argument{in: inBody, name: name}, jsonSchema(ref, b.order, b.budget), "", body.Required && bodyRequired[name])
		}
		return
	}
	var schema any = map[string]any{"type": "string"}
	if isJSON(mediaType) && mt != nil && mt.Schema != nil {
		schema = jsonSchema(mt.Schema, b.order, b.budget)
	}
	description := body.Description
	if description == "" {
		description = "The request body (" + mediaType + ")."
	}
	b.add(argument{in: inBodyWhole, name: "body"}, schema, description, body.Required)
}

// add adds an argument, under a property name of its own, with its schema
// and description.
func (b *inputSchema) add(arg argument, schema any, description string, required bool) {
	property, note := b.claim(arg.name, arg.in)
	arg.property = property
	b.properties.keys = append(b.properties.keys, property)
	b.properties.values[property] = describeProperty(schema, description, note)
	if required {
		b.required = append(b.required, property)
	}
	b.op.args = append(b.op.args, arg)
}

// claim is the property of an argument named name, sent in in: its name,
// or, when another argument has it, a name prefixed with where it goes,
// with a note that says so.
func (b *inputSchema) claim(name, in string) (string, string) {
	property := name
	if _, taken := b.owner[property]; taken {
		prefix := in
		if in == inBodyWhole {
			prefix = "request"
		}
		property = prefix + "_" + name
		for i := 2; ; i++ {
			if _, taken := b.owner[property]; !taken {
				break
			}
			property = fmt.Sprintf("%s_%s_%d", prefix, name, i)
		}
	}
	note := ""
	if property != name {
		note = fmt.Sprintf("Sent as %s; renamed because %q is %s.", locationLabel(in, name), name, b.owner[name])
	}
	b.owner[property] = locationLabel(in, name)
	return property, note
}

// marshal is the input schema, unless its references made it too large.
func (b *inputSchema) marshal() (messages.JSON, error) {
	if b.budget.spent {
		return nil, fmt.Errorf("%w: the input schema holds more than %d schemas once its references are inlined", errSchemaTooLarge, maxInlinedSchemas)
	}
	schema := map[string]any{"type": "object", "properties": b.properties, "additionalProperties": false}
	if len(b.required) > 0 {
		schema["required"] = b.required
	}
	data, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	return data, nil
}

// describeProperty is a property's schema with its description, and the
// note of a renamed one after it.
func describeProperty(schema any, description, note string) any {
	m, ok := schema.(map[string]any)
	if !ok {
		m = map[string]any{}
		if schema == false {
			m["not"] = map[string]any{}
		}
	}
	text := strings.TrimSpace(description)
	if text == "" {
		if d, ok := m["description"].(string); ok {
			text = d
		}
	}
	if note != "" {
		text = strings.TrimSpace(endSentence(text) + " " + note)
	}
	if text != "" {
		m["description"] = text
	}
	return m
}

// endSentence ends text with a full stop unless it already ends a sentence,
// so that a note can follow it.
func endSentence(text string) string {
	if text == "" || strings.HasSuffix(text, ".") || strings.HasSuffix(text, "!") || strings.HasSuffix(text, "?") || strings.HasSuffix(text, ":") {
		return text
	}
	return text + "."
}

// parameters merges the path item's parameters with the operation's; the
// operation's win for the same name and location.
func parameters(item *openapi3.PathItem, op *openapi3.Operation) []*openapi3.Parameter {
	var out []*openapi3.Parameter
	index := map[string]int{}
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, ref := range list {
			if ref == nil || ref.Value == nil {
				continue
			}
			p := ref.Value
			key := p.In + "\x00" + p.Name
			if i, ok := index[key]; ok {
				out[i] = p
				continue
			}
			index[key] = len(out)
			out = append(out, p)
		}
	}
	return out
}

// pickBody chooses the media type a request body is sent as: JSON when
// offered, else the first in alphabetical order.
func pickBody(content openapi3.Content) (string, *openapi3.MediaType) {
	types := make([]string, 0, len(content))
	for t := range content {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		if isJSON(t) {
			return t, content[t]
		}
	}
	if len(types) == 0 {
		return "", nil
	}
	return types[0], content[types[0]]
}

// isJSON reports whether a media type is JSON: application/json or any +json type.
func isJSON(mediaType string) bool {
	t, _, err := mime.ParseMediaType(mediaType)
	if err != nil {
		t = mediaType
	}
	return t == "application/json" || strings.HasSuffix(t, "+json")
}

// outputSchema is the schema of the operation's JSON success response,
// whatever its type: the body is the call's structured content (an MCP
// client gets a value that is not an object wrapped, as the MCP format of
// the tool's output schema says).
func outputSchema(op *openapi3.Operation, order *propertyOrder) messages.JSON {
	if op.Responses == nil {
		return nil
	}
	for _, status := range []string{"200", "201", "202", "2XX"} {
		ref := op.Responses.Value(status)
		if ref == nil || ref.Value == nil {
			continue
		}
		mediaType, mt := pickBody(ref.Value.Content)
		if !isJSON(mediaType) || mt == nil || mt.Schema == nil {
			return nil
		}
		// An output schema only describes the result: one too large to
		// write is left out, and the tool served without it.
		budget := newSchemaBudget()
		converted := jsonSchema(mt.Schema, order, budget)
		if budget.spent {
			return nil
		}
		data, err := json.Marshal(converted)
		if err != nil {
			return nil
		}
		return data
	}
	return nil
}
