// Package jsonparse is Toolbus's one JSON scanner. It reads JSON in place
// into the values encoding/json's Decoder with UseNumber decodes it to:
// nil, bool, json.Number, string, []any and map[string]any (or objects of
// the caller's own type). Strings are read as encoding/json reads them:
// invalid UTF-8 and lone surrogates become U+FFFD, and the last of
// duplicate keys wins. Schemas and call arguments are read on every call;
// the Decoder copies its input into a buffer of its own and builds values
// through reflection.
//
// Its parts (Space, StringBytes, NumberBytes, Literal, Skip) also serve
// readers that walk JSON without building values: the MessagePack bridge
// of package messages and the schema walk of package search.
package jsonparse

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is how deeply arrays and objects may nest ([[1]] nests two
// levels): the limit of every JSON value on the wire (messages.MaxJSONDepth
// is this constant), which bounds the recursion of whatever walks a value.
const MaxDepth = 256

// ErrTooDeep is returned for a value nested deeper than MaxDepth.
var ErrTooDeep = fmt.Errorf("nested deeper than %d levels", MaxDepth)

// Object is an object of the caller's own type being read.
type Object interface {
	Set(key string, value any)
}

// Parser reads JSON from Data, starting at Pos.
type Parser struct {
	Data []byte
	Pos  int
	// NewObject returns the value an object is read into; without it
	// objects are map[string]any.
	NewObject func() Object
	// scratch holds the decoded content of strings with escapes that are
	// skipped or handed out as bytes.
	scratch []byte
	// gaps, when not nil, collects the start and end of every run of
	// white space that Space skipped.
	gaps []int
}

// Parse reads exactly one JSON value, with white space around it.
func Parse(data []byte) (any, error) {
	p := Parser{Data: data}
	return p.Whole()
}

// ParseCompact is Parse that also returns the text without insignificant
// white space, as encoding/json's Compact writes it: a copy of data with
// the white space between tokens left out.
func ParseCompact(data []byte) (any, []byte, error) {
	p := Parser{Data: data, gaps: []int{}}
	v, err := p.Whole()
	if err != nil {
		return nil, nil, err
	}
	compact := make([]byte, 0, len(data))
	from := 0
	for i := 0; i < len(p.gaps); i += 2 {
		compact = append(compact, data[from:p.gaps[i]]...)
		from = p.gaps[i+1]
	}
	return v, append(compact, data[from:]...), nil
}

// Whole reads exactly one value from Pos to the end, with white space around it.
func (p *Parser) Whole() (any, error) {
	p.Space()
	v, err := p.Value(0)
	if err != nil {
		return nil, err
	}
	p.Space()
	if p.Pos < len(p.Data) {
		return nil, fmt.Errorf("trailing data after the JSON value, at offset %d", p.Pos)
	}
	return v, nil
}

// Space skips white space.
func (p *Parser) Space() {
	start := p.Pos
	for p.Pos < len(p.Data) {
		switch p.Data[p.Pos] {
		case ' ', '\t', '\n', '\r':
			p.Pos++
			continue
		}
		break
	}
	if p.gaps != nil && p.Pos > start {
		p.gaps = append(p.gaps, start, p.Pos)
	}
}

// Fail describes what was found at Pos instead of what was expected.
func (p *Parser) Fail(expected string) error {
	if p.Pos >= len(p.Data) {
		return fmt.Errorf("unexpected end of JSON input, expecting %s", expected)
	}
	return fmt.Errorf("invalid character %q at offset %d, expecting %s", p.Data[p.Pos], p.Pos, expected)
}

// Deeper checks that a container at depth (the containers around it
// included) is allowed: arrays and objects nest at most MaxDepth levels.
// It returns ErrTooDeep otherwise.
func (p *Parser) Deeper(depth int) error {
	if depth > MaxDepth {
		return ErrTooDeep
	}
	return nil
}

// Value reads one value inside depth containers.
func (p *Parser) Value(depth int) (any, error) {
	if p.Pos >= len(p.Data) {
		return nil, p.Fail("a value")
	}
	switch c := p.Data[p.Pos]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		return p.String()
	case c == '-' || '0' <= c && c <= '9':
		return p.Number()
	case c == 't':
		return true, p.Literal("true")
	case c == 'f':
		return false, p.Literal("false")
	case c == 'n':
		return nil, p.Literal("null")
	}
	return nil, p.Fail("a value")
}

// Skip checks one value inside depth containers without building it,
// and returns its bytes. It allocates nothing but an error.
func (p *Parser) Skip(depth int) ([]byte, error) {
	start := p.Pos
	if p.Pos >= len(p.Data) {
		return nil, p.Fail("a value")
	}
	switch c := p.Data[p.Pos]; c {
	case '{', '[':
		if err := p.Deeper(depth + 1); err != nil {
			return nil, err
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		p.Pos++
		p.Space()
		if p.Pos < len(p.Data) && p.Data[p.Pos] == closing {
			p.Pos++
			return p.Data[start:p.Pos], nil
		}
		for {
			p.Space()
			if c == '{' {
				if _, err := p.StringBytes(); err != nil {
					return nil, err
				}
				if err := p.Colon(); err != nil {
					return nil, err
				}
			}
			if _, err := p.Skip(depth + 1); err != nil {
				return nil, err
			}
			p.Space()
			if p.Pos < len(p.Data) && p.Data[p.Pos] == ',' {
				p.Pos++
				continue
			}
			if p.Pos < len(p.Data) && p.Data[p.Pos] == closing {
				p.Pos++
				return p.Data[start:p.Pos], nil
			}
			return nil, p.Fail("',' or a closing bracket")
		}
	case '"':
		if _, err := p.StringBytes(); err != nil {
			return nil, err
		}
		return p.Data[start:p.Pos], nil
	case 't', 'f', 'n':
		word := "true"
		if c == 'f' {
			word = "false"
		} else if c == 'n' {
			word = "null"
		}
		if err := p.Literal(word); err != nil {
			return nil, err
		}
		return p.Data[start:p.Pos], nil
	}
	if c := p.Data[p.Pos]; c == '-' || '0' <= c && c <= '9' {
		return p.NumberBytes()
	}
	return nil, p.Fail("a value")
}

// Literal reads true, false or null.
func (p *Parser) Literal(word string) error {
	if len(p.Data)-p.Pos >= len(word) && string(p.Data[p.Pos:p.Pos+len(word)]) == word {
		p.Pos += len(word)
		return nil
	}
	for k := 0; k < len(word) && p.Pos < len(p.Data) && p.Data[p.Pos] == word[k]; k++ {
		p.Pos++ // to the first byte that differs, for the message
	}
	return p.Fail(word)
}

func (p *Parser) object(depth int) (any, error) {
	if err := p.Deeper(depth); err != nil {
		return nil, err
	}
	p.Pos++ // {
	var m map[string]any
	var o Object
	if p.NewObject != nil {
		o = p.NewObject()
	} else {
		m = map[string]any{}
	}
	result := func() any {
		if o != nil {
			return o
		}
		return m
	}
	p.Space()
	if p.Pos < len(p.Data) && p.Data[p.Pos] == '}' {
		p.Pos++
		return result(), nil
	}
	for {
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		v, err := p.Value(depth)
		if err != nil {
			return nil, err
		}
		if o != nil {
			o.Set(k, v)
		} else {
			m[k] = v
		}
		p.Space()
		if p.Pos < len(p.Data) && p.Data[p.Pos] == ',' {
			p.Pos++
			p.Space()
			continue
		}
		if p.Pos < len(p.Data) && p.Data[p.Pos] == '}' {
			p.Pos++
			return result(), nil
		}
		return nil, p.Fail("',' or '}'")
	}
}

// key reads an object's key and the colon after it.
func (p *Parser) key() (string, error) {
	k, err := p.String()
	if err != nil {
		return "", err
	}
	return k, p.Colon()
}

// Colon reads the ':' after an object's key, with white space around it.
func (p *Parser) Colon() error {
	p.Space()
	if p.Pos >= len(p.Data) || p.Data[p.Pos] != ':' {
		return p.Fail("':'")
	}
	p.Pos++
	p.Space()
	return nil
}

func (p *Parser) array(depth int) (any, error) {
	if err := p.Deeper(depth); err != nil {
		return nil, err
	}
	p.Pos++ // [
	a := []any{}
	p.Space()
	if p.Pos < len(p.Data) && p.Data[p.Pos] == ']' {
		p.Pos++
		return a, nil
	}
	for {
		v, err := p.Value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.Space()
		if p.Pos < len(p.Data) && p.Data[p.Pos] == ',' {
			p.Pos++
			p.Space()
			continue
		}
		if p.Pos < len(p.Data) && p.Data[p.Pos] == ']' {
			p.Pos++
			return a, nil
		}
		return nil, p.Fail("',' or ']'")
	}
}

// Number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? as written.
func (p *Parser) Number() (json.Number, error) {
	b, err := p.NumberBytes()
	return json.Number(b), err
}

// NumberBytes reads a number as Number does and returns its bytes, a
// slice of Data.
func (p *Parser) NumberBytes() ([]byte, error) {
	start := p.Pos
	if p.Pos < len(p.Data) && p.Data[p.Pos] == '-' {
		p.Pos++
	}
	switch {
	case p.Pos < len(p.Data) && p.Data[p.Pos] == '0':
		p.Pos++
	case !p.digits():
		return nil, p.Fail("a digit")
	}
	if p.Pos < len(p.Data) && p.Data[p.Pos] == '.' {
		p.Pos++
		if !p.digits() {
			return nil, p.Fail("a digit")
		}
	}
	if p.Pos < len(p.Data) && (p.Data[p.Pos] == 'e' || p.Data[p.Pos] == 'E') {
		p.Pos++
		if p.Pos < len(p.Data) && (p.Data[p.Pos] == '+' || p.Data[p.Pos] == '-') {
			p.Pos++
		}
		if !p.digits() {
			return nil, p.Fail("a digit")
		}
	}
	return p.Data[start:p.Pos], nil
}

func (p *Parser) digits() bool {
	start := p.Pos
	for p.Pos < len(p.Data) && '0' <= p.Data[p.Pos] && p.Data[p.Pos] <= '9' {
		p.Pos++
	}
	return p.Pos > start
}

// String reads a string. One without escapes or bytes to replace is
// copied as it is.
func (p *Parser) String() (string, error) {
	b, err := p.StringBytes()
	return string(b), err
}

// StringBytes reads a string and returns its content decoded. It is a
// slice of Data when the string holds no escape and only valid UTF-8;
// otherwise it is valid until the Parser reads the next string.
func (p *Parser) StringBytes() ([]byte, error) {
	if p.Pos >= len(p.Data) || p.Data[p.Pos] != '"' {
		return nil, p.Fail("a string")
	}
	p.Pos++
	start := p.Pos
	for p.Pos < len(p.Data) {
		c := p.Data[p.Pos]
		switch {
		case c == '"':
			p.Pos++
			return p.Data[start : p.Pos-1], nil
		case c == '\\':
			return p.slowString(start)
		case c < 0x20:
			return nil, p.Fail("a character inside a string")
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(p.Data[p.Pos:])
			if r == utf8.RuneError && size == 1 {
				return p.slowString(start)
			}
			p.Pos += size
			continue
		}
		p.Pos++
	}
	return nil, p.Fail(`'"'`)
}

// slowString decodes a string from its first escape or invalid byte into
// scratch; what lies before, from start, is copied.
func (p *Parser) slowString(start int) ([]byte, error) {
	out := append(p.scratch[:0], p.Data[start:p.Pos]...)
	defer func() { p.scratch = out[:0] }()
	for p.Pos < len(p.Data) {
		c := p.Data[p.Pos]
		switch {
		case c == '"':
			p.Pos++
			return out, nil
		case c < 0x20:
			return nil, p.Fail("a character inside a string")
		case c == '\\':
			p.Pos++
			if p.Pos >= len(p.Data) {
				return nil, p.Fail("an escape")
			}
			e := p.Data[p.Pos]
			p.Pos++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return nil, p.Fail("four hex digits")
				}
				if utf16.IsSurrogate(r) {
					// A pair makes one rune; anything else is replaced.
					if p.Pos+1 < len(p.Data) && p.Data[p.Pos] == '\\' && p.Data[p.Pos+1] == 'u' {
						save := p.Pos
						p.Pos += 2
						if r2, ok := p.hex4(); ok {
							if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
								out = utf8.AppendRune(out, d)
								continue
							}
						}
						p.Pos = save
					}
					r = unicode.ReplacementChar
				}
				out = utf8.AppendRune(out, r)
			default:
				p.Pos--
				return nil, p.Fail("an escape")
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.Pos++
		default:
			r, size := utf8.DecodeRune(p.Data[p.Pos:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, unicode.ReplacementChar)
			} else {
				out = append(out, p.Data[p.Pos:p.Pos+size]...)
			}
			p.Pos += size
		}
	}
	return nil, p.Fail(`'"'`)
}

func (p *Parser) hex4() (rune, bool) {
	if len(p.Data)-p.Pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.Data[p.Pos : p.Pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.Pos += 4
	return r, true
}
