package messages

import (
	"errors"
	"strings"
	"testing"
)

// A JSON value that cannot be packed is refused with an error that says
// what was found where.
func TestJSONAsMsgpackErrors(t *testing.T) {
	deep := strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1)
	for _, tc := range []struct{ in, want string }{
		{`{"a" 1}`, `invalid character '1' at offset 5, expecting ':'`},
		{`[1,]`, `invalid character ']' at offset 3, expecting a value`},
		{`[1 2]`, `invalid character '2' at offset 3, expecting ',' or ']'`},
		{`{"a":1`, `unexpected end of JSON input, expecting ',' or '}'`},
		{`{1:2}`, `invalid character '1' at offset 1, expecting a string`},
		{`tru`, `unexpected end of JSON input, expecting true`},
		{`nul1`, `invalid character '1' at offset 3, expecting null`},
		{`-`, `unexpected end of JSON input, expecting a digit`},
		{`"a\x"`, `invalid character 'x' at offset 3, expecting an escape`},
		{"\"a\nb\"", `invalid character '\n' at offset 2, expecting a character inside a string`},
		{`{"a":1} x`, `trailing data at offset 8`},
		{`1e999`, `number 1e999: strconv.ParseFloat: parsing "1e999": value out of range`},
	} {
		_, err := appendJSONAsMsgpack(nil, []byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %s", tc.in, err, tc.want)
		}
	}
	if _, err := appendJSONAsMsgpack(nil, []byte(deep)); !errors.Is(err, errTooDeep) {
		t.Errorf("%d levels: %v, want %v", MaxJSONDepth+1, err, errTooDeep)
	}
	if _, err := appendJSONAsMsgpack(nil, []byte(deep[1:len(deep)-1])); err != nil {
		t.Errorf("%d levels: %v", MaxJSONDepth, err)
	}
}
