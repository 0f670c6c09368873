package search

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Field is a part of a tool definition that the index scores on its own,
// with its own weight and length normalisation.
type Field uint8

// The indexed fields of a tool.
const (
	// FieldName holds the words of the tool's name: its original name when
	// it has one (the method is a sanitized copy of it) or its method, and
	// its title.
	FieldName Field = iota
	FieldNamespace
	FieldDescription
	// FieldParamName holds the property names of the input schema, nested
	// ones included.
	FieldParamName
	// FieldParamDescription holds the descriptions, titles and enumerated
	// string values of the input schema's properties.
	FieldParamDescription
	FieldTag
	// FieldHint holds the tool's metadata search hint.
	FieldHint
	// FieldLearned holds what use taught of the tool: the normalised terms
	// of the queries after which agents called it (SetLearned), each as
	// often as the evidence for it counts. No definition fills it.
	FieldLearned

	// NumFields is the number of indexed fields.
	NumFields = 8
)

// The scoring loop is unrolled over the fields, and an encoded posting
// keeps one bit a field in a byte; both must change with them.
const _ = uint(NumFields-8) + uint(8-NumFields)

var fieldNames = [NumFields]string{"name", "namespace", "description", "param_name", "param_description", "tag", "hint", "learned"}

// String returns the field's snake_case name.
func (f Field) String() string {
	if int(f) < NumFields {
		return fieldNames[f]
	}
	return "field(" + strconv.Itoa(int(f)) + ")"
}

// maxSchemaDepth bounds how deep the walk of an input schema goes: nested
// objects and arrays of objects a few levels down still describe the tool,
// deeper ones are rarely worth their noise.
const maxSchemaDepth = 4

// maxTF caps a term's frequency in one field of one tool.
const maxTF = 255

// termFreqs is one term's frequency in each field of one tool.
type termFreqs [NumFields]uint8

// analyzed is a tool definition reduced to what the index keeps.
type analyzed struct {
	name      messages.ToolName
	canonical string
	original  string
	terms     []string    // distinct, in order of first occurrence
	freqs     []termFreqs // parallel to terms
	ids       []uint32    // parallel to terms, when resolved in advance
	tags      []string
}

// analyzer tokenizes tool definitions, reusing its memory from one to the
// next; it is not safe for concurrent use.
type analyzer struct {
	tok    tokenizer
	fields [NumFields][]string
	counts map[string]int // term → index in freqs
	terms  []string
	freqs  []termFreqs
}

// maxStemCache bounds the memory of an analyzer's stem cache.
const maxStemCache = 1 << 16

func newAnalyzer() *analyzer {
	return &analyzer{tok: tokenizer{stems: make(map[string]string)}, counts: make(map[string]int)}
}

// tokens appends the terms of text to dst.
func (a *analyzer) tokens(dst []string, text string) []string {
	a.tok.dst = dst
	a.tok.run(text)
	dst, a.tok.dst = a.tok.dst, nil
	return dst
}

// analyze tokenizes every field of def.
func (a *analyzer) analyze(def *messages.ToolDefinition) analyzed {
	fields := &a.fields
	for f := range fields {
		fields[f] = fields[f][:0]
	}
	nameSource := def.Method
	if def.OriginalName != "" {
		nameSource = def.OriginalName
	}
	fields[FieldName] = a.tokens(fields[FieldName], nameSource)
	if def.Title != "" {
		// The title mostly repeats the name's words; count each word once.
		n := len(fields[FieldName])
		fields[FieldName] = a.tokens(fields[FieldName], def.Title)
		kept := fields[FieldName][:n]
		for _, tok := range fields[FieldName][n:] {
			if !contains(kept, tok) {
				kept = append(kept, tok)
			}
		}
		fields[FieldName] = kept
	}
	fields[FieldNamespace] = a.tokens(fields[FieldNamespace], def.Namespace)
	fields[FieldDescription] = a.tokens(fields[FieldDescription], def.Description)
	if len(def.InputSchema) > 0 {
		a.walkSchema(def.InputSchema)
	}
	for _, tag := range def.Metadata.Tags {
		fields[FieldTag] = a.tokens(fields[FieldTag], tag)
	}
	fields[FieldHint] = a.tokens(fields[FieldHint], def.Metadata.SearchHint)

	clear(a.counts)
	a.terms, a.freqs = a.terms[:0], a.freqs[:0]
	for f := range fields {
		for _, tok := range fields[f] {
			i, ok := a.counts[tok]
			if !ok {
				i = len(a.terms)
				a.counts[tok] = i
				a.terms = append(a.terms, tok)
				a.freqs = append(a.freqs, termFreqs{})
			}
			if a.freqs[i][f] < maxTF {
				a.freqs[i][f]++
			}
		}
	}
	return analyzed{
		name:      def.ToolName(),
		canonical: def.ToolName().String(),
		original:  strings.ToValidUTF8(def.OriginalName, "\uFFFD"),
		terms:     slices.Clone(a.terms),
		freqs:     slices.Clone(a.freqs),
		tags:      dedupeSorted(def.Metadata.Tags),
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// dedupeSorted returns the distinct entries of list, made valid UTF-8, sorted.
func dedupeSorted(list []string) []string {
	if len(list) == 0 {
		return nil
	}
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = strings.ToValidUTF8(s, "\uFFFD")
	}
	sort.Strings(out)
	n := 1
	for i := 1; i < len(out); i++ {
		if out[i] != out[n-1] {
			out[n] = out[i]
			n++
		}
	}
	return out[:n]
}
