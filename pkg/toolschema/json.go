package toolschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/support/jsonparse"
	"github.com/toolbus/toolbus/pkg/messages"
)

// maxDepth bounds the nesting of a schema, so that hostile input cannot
// exhaust the stack: the one limit of JSON values on the wire.
const maxDepth = messages.MaxJSONDepth

// A parsed JSON value is one of: nil, bool, json.Number, string, []any,
// *object. Numbers keep their source text.

// object is a JSON object that keeps its keys in order. Duplicate keys
// keep the last value, at the position of the first.
type object struct {
	keys []string
	vals []any
	// index speeds up lookups in large objects; nil until needed.
	index map[string]int
}

const indexThreshold = 16

func (o *object) find(key string) int {
	if len(o.keys) > indexThreshold {
		if o.index == nil {
			o.index = make(map[string]int, len(o.keys))
			for i, k := range o.keys {
				o.index[k] = i
			}
		}
		if i, ok := o.index[key]; ok {
			return i
		}
		return -1
	}
	for i, k := range o.keys {
		if k == key {
			return i
		}
	}
	return -1
}

func (o *object) get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	if i := o.find(key); i >= 0 {
		return o.vals[i], true
	}
	return nil, false
}

func (o *object) has(key string) bool {
	_, ok := o.get(key)
	return ok
}

// set replaces the value of key in place, or appends the key.
func (o *object) set(key string, v any) {
	if i := o.find(key); i >= 0 {
		o.vals[i] = v
		return
	}
	o.keys = append(o.keys, key)
	o.vals = append(o.vals, v)
	if o.index != nil {
		o.index[key] = len(o.keys) - 1
	}
}

// setFirst puts key first, removing it from where it was.
func (o *object) setFirst(key string, v any) {
	o.del(key)
	o.keys = append([]string{key}, o.keys...)
	o.vals = append([]any{v}, o.vals...)
	o.index = nil
}

func (o *object) del(key string) {
	i := o.find(key)
	if i < 0 {
		return
	}
	o.keys = append(o.keys[:i], o.keys[i+1:]...)
	o.vals = append(o.vals[:i], o.vals[i+1:]...)
	o.index = nil
}

func (o *object) len() int { return len(o.keys) }

// clone copies the object itself; the values are shared.
func (o *object) clone() *object {
	return &object{keys: append([]string(nil), o.keys...), vals: append([]any(nil), o.vals...)}
}

func (o *object) str(key string) (string, bool) {
	v, _ := o.get(key)
	s, ok := v.(string)
	return s, ok
}

func (o *object) obj(key string) (*object, bool) {
	v, _ := o.get(key)
	m, ok := v.(*object)
	return m, ok
}

func (o *object) list(key string) ([]any, bool) {
	v, _ := o.get(key)
	l, ok := v.([]any)
	return l, ok
}

// parse reads one JSON value, objects in order (see jsonparse): schemas
// are parsed on every Format call.
func parse(data []byte) (any, error) {
	p := newParser(data)
	return p.Whole()
}

// parser reads schemas and arguments: objects keep their order, and
// nesting is bounded by maxDepth (see jsonparse.Parser.Deeper).
type parser struct{ jsonparse.Parser }

func newParser(data []byte) *parser {
	return &parser{jsonparse.Parser{Data: data, NewObject: func() jsonparse.Object { return &object{} }}}
}

// Set adds a key, for jsonparse.
func (o *object) Set(key string, value any) { o.set(key, value) }

// encode writes v as compact JSON. Object keys keep their order, so the
// same value always encodes to the same bytes.
func encode(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case json.Number:
		buf.WriteString(string(t))
	case string:
		writeString(buf, t)
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			encode(buf, e)
		}
		buf.WriteByte(']')
	case *object:
		buf.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			encode(buf, t.vals[i])
		}
		buf.WriteByte('}')
	default:
		panic(fmt.Sprintf("toolschema: cannot encode %T", v))
	}
}

func encodeToString(v any) string {
	var buf bytes.Buffer
	encode(&buf, v)
	return buf.String()
}

const hexDigits = "0123456789abcdef"

// writeString writes s as a JSON string. Unlike encoding/json it leaves
// '<', '>' and '&' alone: the output goes to model APIs, not into HTML.
func writeString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf.WriteByte('\\')
				buf.WriteByte(c)
			case c == '\n':
				buf.WriteString(`\n`)
			case c == '\r':
				buf.WriteString(`\r`)
			case c == '\t':
				buf.WriteString(`\t`)
			case c < 0x20:
				buf.WriteString(`\u00`)
				buf.WriteByte(hexDigits[c>>4])
				buf.WriteByte(hexDigits[c&0xf])
			default:
				buf.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf.WriteString(`\ufffd`)
		case r == '\u2028' || r == '\u2029':
			buf.WriteString(`\u202`)
			buf.WriteByte(hexDigits[r&0xf])
		default:
			buf.WriteString(s[i : i+size])
		}
		i += size
	}
	buf.WriteByte('"')
}

// pointer resolves a local JSON reference ("#", "#/$defs/Name") in doc.
func pointer(doc any, ref string) (any, bool) {
	if !strings.HasPrefix(ref, "#") {
		return nil, false
	}
	frag := ref[1:]
	if frag == "" {
		return doc, true
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, false // a named anchor; not supported
	}
	cur := doc
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = unescapeToken(tok)
		switch c := cur.(type) {
		case *object:
			v, ok := c.get(tok)
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func unescapeToken(tok string) string {
	if strings.Contains(tok, "%") {
		if u, err := urlUnescape(tok); err == nil {
			tok = u
		}
	}
	tok = strings.ReplaceAll(tok, "~1", "/")
	return strings.ReplaceAll(tok, "~0", "~")
}

// urlUnescape decodes %XX escapes, as a URI fragment may hold them.
func urlUnescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("short escape")
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", err
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}
