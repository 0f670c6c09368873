package search

import (
	"unicode/utf8"

	"github.com/toolbus/toolbus/pkg/messages"
)

// walkSchema adds the property names of an input schema to FieldParamName
// and their descriptions, titles and enumerated strings to
// FieldParamDescription, recursing into nested objects, array items and
// alternatives (anyOf, oneOf, allOf) down to maxSchemaDepth. A schema that
// is not valid JSON adds nothing.
//
// It scans the JSON itself instead of decoding it with encoding/json:
// decoding was half the cost of indexing a tool, and a scan that skips what
// it does not need allocates only the strings it keeps.
func (a *analyzer) walkSchema(schema []byte) {
	names, descriptions := len(a.fields[FieldParamName]), len(a.fields[FieldParamDescription])
	sc := schemaScanner{data: schema, a: a}
	sc.space()
	ok := sc.peek() == '{' && sc.schema(0, false) && sc.end()
	if !ok {
		a.fields[FieldParamName] = a.fields[FieldParamName][:names]
		a.fields[FieldParamDescription] = a.fields[FieldParamDescription][:descriptions]
	}
}

type schemaScanner struct {
	data []byte
	pos  int
	a    *analyzer
	buf  []byte
	// open counts the arrays and objects the scanner is in. A schema that
	// nests deeper than messages.MaxJSONDepth, which no decoded message
	// holds, is refused, so that hostile input cannot exhaust the stack.
	open int
}

func (s *schemaScanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *schemaScanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *schemaScanner) end() bool {
	s.space()
	return s.pos == len(s.data)
}

// expect consumes c after optional white space.
func (s *schemaScanner) expect(c byte) bool {
	s.space()
	if s.peek() != c {
		return false
	}
	s.pos++
	return true
}

// schema walks the object at the scanner, a schema at depth; describe says
// whether its description belongs to a parameter (the root's describes the
// whole tool, which has a field of its own).
func (s *schemaScanner) schema(depth int, describe bool) bool {
	if depth > maxSchemaDepth {
		return s.skip()
	}
	if !s.expect('{') {
		return false
	}
	return s.members(func(key string) bool {
		s.space()
		switch key {
		case "title", "description":
			if s.peek() != '"' {
				return s.skip()
			}
			text, ok := s.string()
			if ok && describe {
				s.describe(text)
			}
			return ok
		case "enum":
			if s.peek() != '[' {
				return s.skip()
			}
			return s.elements(func() bool {
				s.space()
				if s.peek() != '"' {
					return s.skip()
				}
				text, ok := s.string()
				if ok && describe {
					s.describe(text)
				}
				return ok
			})
		case "properties":
			if s.peek() != '{' {
				return s.skip()
			}
			s.pos++
			return s.members(func(name string) bool {
				s.space()
				f := &s.a.fields[FieldParamName]
				*f = s.a.tokens(*f, name)
				if s.peek() != '{' {
					return s.skip()
				}
				return s.schema(depth+1, true)
			})
		case "items":
			switch s.peek() {
			case '{':
				return s.schema(depth+1, true)
			case '[':
				return s.schemas(depth+1, true)
			}
			return s.skip()
		case "anyOf", "oneOf", "allOf":
			if s.peek() != '[' {
				return s.skip()
			}
			return s.schemas(depth+1, describe)
		}
		return s.skip()
	})
}

// schemas walks an array of schemas; elements that are not objects are skipped.
func (s *schemaScanner) schemas(depth int, describe bool) bool {
	return s.elements(func() bool {
		s.space()
		if s.peek() != '{' {
			return s.skip()
		}
		return s.schema(depth, describe)
	})
}

func (s *schemaScanner) describe(text string) {
	f := &s.a.fields[FieldParamDescription]
	*f = s.a.tokens(*f, text)
}

// members reads the members of an object whose '{' is consumed, calling
// member with each key with the scanner at the value, which member consumes.
func (s *schemaScanner) members(member func(key string) bool) bool {
	if s.open++; s.open > messages.MaxJSONDepth {
		return false
	}
	ok := s.eachMember(member)
	s.open--
	return ok
}

func (s *schemaScanner) eachMember(member func(key string) bool) bool {
	if s.expect('}') {
		return true
	}
	for {
		s.space()
		if s.peek() != '"' {
			return false
		}
		key, ok := s.string()
		if !ok || !s.expect(':') || !member(key) {
			return false
		}
		if s.expect('}') {
			return true
		}
		if !s.expect(',') {
			return false
		}
	}
}

// elements reads the elements of the array at the scanner, calling element
// with the scanner at each.
func (s *schemaScanner) elements(element func() bool) bool {
	if !s.expect('[') {
		return false
	}
	if s.open++; s.open > messages.MaxJSONDepth {
		return false
	}
	ok := s.eachElement(element)
	s.open--
	return ok
}

func (s *schemaScanner) eachElement(element func() bool) bool {
	if s.expect(']') {
		return true
	}
	for {
		if !element() {
			return false
		}
		if s.expect(']') {
			return true
		}
		if !s.expect(',') {
			return false
		}
	}
}

// skip consumes one JSON value, checking its syntax.
func (s *schemaScanner) skip() bool {
	s.space()
	switch c := s.peek(); {
	case c == '{':
		s.pos++
		return s.members(func(string) bool { return s.skip() })
	case c == '[':
		return s.elements(func() bool { return s.skip() })
	case c == '"':
		_, ok := s.stringBytes()
		return ok
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number()
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s.data)-s.pos >= len(lit) && string(s.data[s.pos:s.pos+len(lit)]) == lit {
			s.pos += len(lit)
			return true
		}
	}
	return false
}

// number consumes a number as JSON spells it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *schemaScanner) number() bool {
	if s.peek() == '-' {
		s.pos++
	}
	switch c := s.peek(); {
	case c == '0':
		s.pos++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.peek() == '.' {
		s.pos++
		if !s.digits() {
			return false
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits consumes a run of decimal digits and reports whether there was one.
func (s *schemaScanner) digits() bool {
	start := s.pos
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos > start
}

// string reads the string at the scanner.
func (s *schemaScanner) string() (string, bool) {
	b, ok := s.stringBytes()
	return string(b), ok
}

// stringBytes reads the string at the scanner, unescaped; the bytes are
// valid until the next call.
func (s *schemaScanner) stringBytes() ([]byte, bool) {
	s.pos++ // the opening quote
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if c == '"' {
			s.pos++
			return s.data[start : s.pos-1], true
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return nil, false
		}
		s.pos++
	}
	s.buf = append(s.buf[:0], s.data[start:s.pos]...)
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return s.buf, true
		case c < 0x20:
			return nil, false
		case c != '\\':
			s.buf = append(s.buf, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			return nil, false
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			s.buf = append(s.buf, e)
		case 'b':
			s.buf = append(s.buf, '\b')
		case 'f':
			s.buf = append(s.buf, '\f')
		case 'n':
			s.buf = append(s.buf, '\n')
		case 'r':
			s.buf = append(s.buf, '\r')
		case 't':
			s.buf = append(s.buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, false
			}
			if utf16Surrogate(r) {
				// A surrogate pair is two escapes; a lone half is U+FFFD.
				if lo, ok := s.lowSurrogate(); ok {
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				} else {
					r = utf8.RuneError
				}
			}
			s.buf = utf8.AppendRune(s.buf, r)
		default:
			return nil, false
		}
	}
	return nil, false
}

func utf16Surrogate(r rune) bool { return 0xD800 <= r && r < 0xDC00 }

// lowSurrogate consumes a \uDC00-\uDFFF escape when one follows.
func (s *schemaScanner) lowSurrogate() (rune, bool) {
	if len(s.data)-s.pos < 6 || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
		return 0, false
	}
	save := s.pos
	s.pos += 2
	r, ok := s.hex4()
	if !ok || r < 0xDC00 || r > 0xDFFF {
		s.pos = save
		return 0, false
	}
	return r, true
}

func (s *schemaScanner) hex4() (rune, bool) {
	if len(s.data)-s.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s.data[s.pos : s.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	s.pos += 4
	return r, true
}
