package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Call is one call as a tool sees it.
type Call struct {
	ID        string
	Tool      string
	Agent     string
	Turn      string
	Arguments messages.JSON
	// Attempt counts deliveries of this call, starting at 1.
	Attempt  int
	Deadline time.Time
}

// Result is what a tool answers. IsError marks the tool's own failure.
type Result struct {
	Content           []messages.ContentBlock
	StructuredContent messages.JSON
	IsError           bool
}

// Text returns a result holding one text block.
func Text(s string) *Result { return &Result{Content: []messages.ContentBlock{messages.TextBlock(s)}} }

// Handler executes calls of one tool. An error it returns becomes a tool
// error result (is_error), unless it wraps ErrRetry.
type Handler interface {
	Handle(ctx context.Context, call *Call) (*Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call *Call) (*Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, call *Call) (*Result, error) { return f(ctx, call) }

// ErrRetry marks an error after which the call should be delivered again,
// to this or another worker, after a short delay. The attempt counts
// against the namespace's MaxAttempts. A tool that is at most once (see
// AtMostOnce) cannot be retried: its call fails with
// messages.ResultOutcomeUnknown, the error in the message. The worker stores the error (less
// ErrRetry's own text) as a log event of level messages.LogRetry, and if
// the attempts run out, the call's max_attempts failure quotes it as the
// cause.
var ErrRetry = errors.New("retry the call")

// Retry wraps err so that the call is delivered again.
func Retry(err error) error { return fmt.Errorf("%w: %w", ErrRetry, err) }

// Tool is a tool a worker serves: its definition and its handler. Serve
// fills in the definition's Name and Namespace.
type Tool struct {
	Definition messages.ToolDefinition
	Handler    Handler
	// misfit is why Func made a tool no call could fit; Serve refuses it.
	misfit error
}

// ToolOption adjusts a tool's definition.
type ToolOption func(*messages.ToolDefinition)

// WithTimeout bounds every call of the tool.
func WithTimeout(d time.Duration) ToolOption {
	return func(def *messages.ToolDefinition) { def.Metadata.TimeoutMS = d.Milliseconds() }
}

// WithTags tags the tool.
func WithTags(tags ...string) ToolOption {
	return func(def *messages.ToolDefinition) { def.Metadata.Tags = append(def.Metadata.Tags, tags...) }
}

// WithSearchHint adds words that help discovery find the tool.
func WithSearchHint(hint string) ToolOption {
	return func(def *messages.ToolDefinition) { def.Metadata.SearchHint = hint }
}

// WithTitle sets a human-readable title.
func WithTitle(title string) ToolOption {
	return func(def *messages.ToolDefinition) { def.Title = title }
}

// WithMaxResultSize sets the size in bytes beyond which results are truncated for the model.
func WithMaxResultSize(n int) ToolOption {
	return func(def *messages.ToolDefinition) { def.Metadata.MaxResultSize = n }
}

// WithDelivery sets the tool's delivery guarantee (see messages.Delivery).
// Without it a tool tagged messages.TagDestructive is at most once and
// any other at least once (messages.DefaultDelivery).
func WithDelivery(d messages.Delivery) ToolOption {
	return func(def *messages.ToolDefinition) { def.Delivery = d }
}

// AtMostOnce makes the tool at most once: a call whose worker stopped
// while the tool ran is not run again but fails with
// messages.ResultOutcomeUnknown, and an ErrRetry the tool returns is
// refused. Short for WithDelivery(messages.DeliveryAtMostOnce).
func AtMostOnce() ToolOption { return WithDelivery(messages.DeliveryAtMostOnce) }

// ConcurrencySafe marks the tool as safe to run in parallel with other calls of a turn.
func ConcurrencySafe() ToolOption {
	return func(def *messages.ToolDefinition) { def.Metadata.ConcurrencySafe = true }
}

// Func makes a tool of a typed Go function. The input schema is generated
// from In, a struct whose json tags name the parameters (fields without
// omitempty are required; a `jsonschema:"description=..."` tag describes
// one). The function's result becomes the call's content: a string is a
// text block, a *Result is used as it is, anything else is a JSON block
// and the structured content, with an output schema generated from Out
// when it is a struct, a slice, an array, a map of string keys, a boolean
// or a number (a nil slice or map is sent empty, as that schema says).
// An error is the tool's own failure (is_error) unless it wraps ErrRetry.
func Func[In, Out any](method, description string, fn func(ctx context.Context, in In) (Out, error), opts ...ToolOption) Tool {
	def := messages.ToolDefinition{
		Method:      method,
		Description: description,
		InputSchema: schemaFor[In](),
		Source:      messages.ToolSource{Kind: messages.SourceGo},
	}
	outType := reflect.TypeFor[Out]()
	switch {
	case outType.Kind() == reflect.Struct || (outType.Kind() == reflect.Pointer && outType.Elem().Kind() == reflect.Struct && outType != reflect.TypeFor[*Result]()):
		def.OutputSchema = schemaFor[Out]()
	case structuredValue(outType):
		def.OutputSchema = valueSchema(outType)
	}
	for _, opt := range opts {
		opt(&def)
	}
	handler := HandlerFunc(func(ctx context.Context, call *Call) (*Result, error) {
		var in In
		if len(call.Arguments) > 0 {
			if err := json.Unmarshal(call.Arguments, &in); err != nil {
				return nil, fmt.Errorf("arguments do not fit %s: %w", method, err)
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		return toResult(out)
	})
	return Tool{Definition: def, Handler: handler, misfit: argumentsMisfit[In](method)}
}

func toResult(out any) (*Result, error) {
	switch v := out.(type) {
	case string:
		return Text(v), nil
	case *Result:
		if v == nil {
			return &Result{}, nil
		}
		return v, nil
	case Result:
		return &v, nil
	case []messages.ContentBlock:
		return &Result{Content: v}, nil
	case messages.JSON:
		return &Result{Content: []messages.ContentBlock{messages.JSONBlock(v)}, StructuredContent: v}, nil
	}
	if v := reflect.ValueOf(out); (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.IsNil() {
		// Empty, as its output schema says, rather than null.
		out = reflect.MakeMap(reflect.MapOf(reflect.TypeFor[string](), reflect.TypeFor[any]())).Interface()
		if v.Kind() == reflect.Slice {
			out = []any{}
		}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return &Result{Content: []messages.ContentBlock{messages.JSONBlock(data)}, StructuredContent: data}, nil
}

// structuredValue reports whether Func's result of type t, not a struct,
// is JSON structured content with a schema: a slice, array or map of
// string keys (other than the content types toResult passes as they are),
// a boolean or a number.
func structuredValue(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return t.Elem().Kind() != reflect.Uint8 && t != reflect.TypeFor[[]messages.ContentBlock]()
	case reflect.Map:
		return t.Key().Kind() == reflect.String
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// valueSchema is the JSON schema of a value of type t (see structuredValue).
func valueSchema(t reflect.Type) messages.JSON {
	s := reflector.ReflectFromType(t)
	s.Version = ""
	data, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("worker: schema of %v: %v", t, err))
	}
	return data
}

var reflector = &jsonschema.Reflector{
	ExpandedStruct:            true,
	DoNotReference:            true,
	AllowAdditionalProperties: false,
	Anonymous:                 true,
}

// argumentsMisfit says why a tool whose arguments decode into In could
// never be called: arguments are a JSON object, which decodes into a
// struct, a map with string keys or an interface only.
func argumentsMisfit[In any](method string) error {
	t := reflect.TypeFor[In]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct, t.Kind() == reflect.Interface:
		return nil
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		return nil
	}
	return fmt.Errorf("the arguments of %s decode into %v, and a tool's arguments are a JSON object: take a struct (or a map with string keys)", method, t)
}

func schemaFor[T any]() messages.JSON {
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return messages.JSON(`{"type":"object"}`)
	}
	s := reflector.ReflectFromType(t)
	s.Version = ""
	data, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("worker: schema of %v: %v", t, err))
	}
	return data
}
