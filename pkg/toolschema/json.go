package toolschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of a schema, so that hostile input cannot
// exhaust the stack.
const maxDepth = 128

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

// parse reads one JSON value. It is a small recursive-descent parser:
// schemas are parsed on every Format call, and encoding/json's token API
// allocates for every token.
func parse(data []byte) (any, error) {
	p := parser{data: data}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos < len(p.data) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

type parser struct {
	data []byte
	pos  int
}

func (p *parser) fail(what string) error {
	if p.pos >= len(p.data) {
		return fmt.Errorf("unexpected end of JSON input, want %s", what)
	}
	return fmt.Errorf("invalid character %q at offset %d, want %s", p.data[p.pos], p.pos, what)
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	if p.pos >= len(p.data) {
		return nil, p.fail("a value")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		p.pos++
		o := &object{}
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == '}' {
			p.pos++
			return o, nil
		}
		for {
			p.space()
			k, err := p.string()
			if err != nil {
				return nil, err
			}
			p.space()
			if p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return nil, p.fail("':'")
			}
			p.pos++
			p.space()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			o.set(k, v)
			p.space()
			if p.pos < len(p.data) && p.data[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.data) && p.data[p.pos] == '}' {
				p.pos++
				return o, nil
			}
			return nil, p.fail("',' or '}'")
		}
	case c == '[':
		p.pos++
		l := []any{}
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == ']' {
			p.pos++
			return l, nil
		}
		for {
			p.space()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
			p.space()
			if p.pos < len(p.data) && p.data[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.data) && p.data[p.pos] == ']' {
				p.pos++
				return l, nil
			}
			return nil, p.fail("',' or ']'")
		}
	case c == '"':
		return p.string()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return nil, p.fail("a value")
}

func (p *parser) literal(word string) error {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return p.fail(word)
	}
	p.pos += len(word)
	return nil
}

func (p *parser) number() (json.Number, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return "", p.fail("a digit")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return "", p.fail("a digit")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return "", p.fail("a digit")
		}
	}
	return json.Number(p.data[start:p.pos]), nil
}

// string reads a JSON string. Invalid UTF-8 and unpaired surrogates become
// U+FFFD, as encoding/json does.
func (p *parser) string() (string, error) {
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return "", p.fail("a string")
	}
	p.pos++
	start := p.pos
	// Fast path: no escapes, valid UTF-8.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := p.data[start:p.pos]
			if utf8.Valid(s) {
				p.pos++
				return string(s), nil
			}
			break
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.pos++
	}
	var b strings.Builder
	b.Write(p.data[start:p.pos])
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return strings.ToValidUTF8(b.String(), "\uFFFD"), nil
		case c < 0x20:
			return "", p.fail("no control character in a string")
		case c == '\\':
			p.pos++
			if p.pos >= len(p.data) {
				return "", p.fail("an escape")
			}
			e := p.data[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.fail("four hex digits")
				}
				if utf16.IsSurrogate(r) {
					save := p.pos
					if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
						p.pos += 2
						if r2, ok := p.hex4(); ok {
							if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
								b.WriteRune(d)
								continue
							}
						}
					}
					p.pos = save
					r = utf8.RuneError
				}
				b.WriteRune(r)
			default:
				p.pos--
				return "", p.fail("a valid escape")
			}
		default:
			b.WriteByte(c)
			p.pos++
		}
	}
	return "", p.fail("'\"'")
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// skip checks one JSON value without building it, returning its bytes.
func (p *parser) skip(depth int) ([]byte, error) {
	start := p.pos
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	if p.pos >= len(p.data) {
		return nil, p.fail("a value")
	}
	switch c := p.data[p.pos]; c {
	case '{', '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		p.pos++
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == closing {
			p.pos++
			return p.data[start:p.pos], nil
		}
		for {
			p.space()
			if c == '{' {
				if _, err := p.string(); err != nil {
					return nil, err
				}
				p.space()
				if p.pos >= len(p.data) || p.data[p.pos] != ':' {
					return nil, p.fail("':'")
				}
				p.pos++
				p.space()
			}
			if _, err := p.skip(depth + 1); err != nil {
				return nil, err
			}
			p.space()
			if p.pos < len(p.data) && p.data[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.data) && p.data[p.pos] == closing {
				p.pos++
				return p.data[start:p.pos], nil
			}
			return nil, p.fail("',' or a closing bracket")
		}
	}
	if _, err := p.value(depth); err != nil {
		return nil, err
	}
	return p.data[start:p.pos], nil
}

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
