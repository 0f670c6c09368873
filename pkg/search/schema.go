package search

import "github.com/toolbus/toolbus/internal/support/jsonparse"

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
	sc := schemaScanner{Parser: jsonparse.Parser{Data: schema}, a: a}
	sc.Space()
	ok := sc.peek() == '{' && sc.schema(0, false) && sc.end()
	if !ok {
		a.fields[FieldParamName] = a.fields[FieldParamName][:names]
		a.fields[FieldParamDescription] = a.fields[FieldParamDescription][:descriptions]
	}
}

type schemaScanner struct {
	jsonparse.Parser
	a *analyzer
	// open counts the arrays and objects the scanner is in. A schema that
	// nests deeper than jsonparse.MaxDepth (messages.MaxJSONDepth), which
	// no decoded message holds, is refused, so that hostile input cannot
	// exhaust the stack.
	open int
}

func (s *schemaScanner) peek() byte {
	if s.Pos < len(s.Data) {
		return s.Data[s.Pos]
	}
	return 0
}

func (s *schemaScanner) end() bool {
	s.Space()
	return s.Pos == len(s.Data)
}

// expect consumes c after optional white space.
func (s *schemaScanner) expect(c byte) bool {
	s.Space()
	if s.peek() != c {
		return false
	}
	s.Pos++
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
		s.Space()
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
				s.Space()
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
			s.Pos++
			return s.members(func(name string) bool {
				s.Space()
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
		s.Space()
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
	if s.open++; s.Deeper(s.open) != nil {
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
		s.Space()
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
	if s.open++; s.Deeper(s.open) != nil {
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
	s.Space()
	_, err := s.Skip(s.open)
	return err == nil
}

// string reads the string at the scanner.
func (s *schemaScanner) string() (string, bool) {
	b, err := s.StringBytes()
	return string(b), err == nil
}
