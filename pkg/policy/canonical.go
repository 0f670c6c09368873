package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/support/jsonparse"
	"github.com/toolbus/toolbus/pkg/messages"
)

// ArgumentsDigest returns the hex SHA-256 of the canonical JSON form of a
// call's arguments, so that an approval binds to the exact arguments however
// their keys were ordered or their numbers written. Empty arguments and null
// count as {}. It fails only when the arguments are not valid JSON.
//
// The canonical form is that of RFC 8785 (JSON Canonicalization Scheme):
// object keys sorted by their UTF-16 code units, no insignificant
// whitespace, strings escaped minimally, numbers in the shortest ECMAScript
// notation (1.0, 1e0 and 1 are all written 1; -0 is 0) — except that a
// number keeps every significant digit it was written with instead of being
// rounded to a float64, so that 9007199254740993 and 9007199254740992 stay
// different. Where an object holds a key twice, the last value counts.
func ArgumentsDigest(arguments messages.JSON) (string, error) {
	v, err := DecodeArguments(arguments)
	if err != nil {
		return "", fmt.Errorf("arguments digest: %w", err)
	}
	return DigestOf(v), nil
}

// DecodeArguments decodes a call's arguments the way ArgumentsDigest reads
// them: numbers as json.Number, empty arguments and null as {}. A caller
// that also needs the decoded value (to validate it against a schema)
// decodes once and passes it to DigestOf.
func DecodeArguments(arguments messages.JSON) (any, error) {
	raw := []byte(arguments)
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		raw = emptyObject
	}
	return decodeJSON(raw)
}

// DigestOf is ArgumentsDigest of arguments decoded by DecodeArguments.
func DigestOf(arguments any) string {
	sum := sha256.Sum256(appendCanonical(nil, arguments))
	return hex.EncodeToString(sum[:])
}

// canonicalize returns the canonical JSON form of raw (see ArgumentsDigest).
func canonicalize(raw []byte) ([]byte, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	return appendCanonical(nil, v), nil
}

// decodeJSON decodes exactly one JSON value, numbers as json.Number, as
// encoding/json's Decoder does (see jsonparse). Nesting deeper than
// messages.MaxJSONDepth levels is refused, which bounds the recursion of
// everything that walks the result.
func decodeJSON(raw []byte) (any, error) {
	v, err := jsonparse.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	return v, nil
}

// appendCanonical appends the canonical form of a value that decodeJSON
// produced (or that is built of the same types).
func appendCanonical(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, x)
	case string:
		return appendString(dst, x)
	case json.Number:
		return appendNumber(dst, string(x))
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonical(dst, e)
		}
		return append(dst, ']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendCanonical(dst, x[k])
		}
		return append(dst, '}')
	}
	panic(fmt.Sprintf("policy: no canonical JSON form for %T", v))
}

// appendString writes s as a JSON string the way RFC 8785 does: only '"',
// '\' and control characters are escaped.
func appendString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c >= 0x20:
			dst = append(dst, c)
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
	return append(dst, '"')
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// sorts object keys. It differs from byte order only between characters
// above U+FFFF and those from U+E000 to U+FFFF.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ua, ub := firstUTF16Unit(ra), firstUTF16Unit(rb)
			if ua != ub {
				return int(ua) - int(ub)
			}
			// Both above U+FFFF with the same high surrogate: the low
			// surrogates follow code point order.
			return int(ra) - int(rb)
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

func firstUTF16Unit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}

// appendNumber appends the canonical form of num, which must have JSON
// number syntax: its exact decimal value in the notation that ECMAScript's
// Number::toString would choose for a number with those digits.
func appendNumber[T string | []byte](dst []byte, num T) []byte {
	i := 0
	neg := false
	if i < len(num) && num[i] == '-' {
		neg = true
		i++
	}
	// The value is digits × 10^exp, digits without leading zeros.
	var buf [40]byte
	digits := buf[:0]
	var exp int64
	for ; i < len(num) && isDigit(num[i]); i++ {
		if len(digits) > 0 || num[i] != '0' {
			digits = append(digits, num[i])
		}
	}
	if i < len(num) && num[i] == '.' {
		for i++; i < len(num) && isDigit(num[i]); i++ {
			if len(digits) > 0 || num[i] != '0' {
				digits = append(digits, num[i])
			}
			exp--
		}
	}
	var bigExp *big.Int
	if i < len(num) && (num[i] == 'e' || num[i] == 'E') {
		i++
		expNeg := false
		if i < len(num) && (num[i] == '+' || num[i] == '-') {
			expNeg = num[i] == '-'
			i++
		}
		for i < len(num) && num[i] == '0' {
			i++
		}
		text := num[i:]
		if len(text) <= 15 {
			var e int64
			for j := 0; j < len(text) && isDigit(text[j]); j++ {
				e = e*10 + int64(text[j]-'0')
			}
			if expNeg {
				e = -e
			}
			exp += e
		} else {
			bigExp, _ = new(big.Int).SetString(string(text), 10)
			if expNeg {
				bigExp.Neg(bigExp)
			}
		}
	}
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	if len(digits) == 0 {
		return append(dst, '0')
	}
	if neg {
		dst = append(dst, '-')
	}
	k := int64(len(digits))
	if bigExp != nil {
		// |n| is beyond 10^15, so the notation is exponential.
		n1 := bigExp.Add(bigExp, big.NewInt(exp+k-1))
		dst = appendMantissa(dst, digits)
		dst = append(dst, 'e')
		if n1.Sign() >= 0 {
			dst = append(dst, '+')
		}
		return n1.Append(dst, 10)
	}
	n := k + exp // the decimal point sits after the n-th digit
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for ; n > k; n-- {
			dst = append(dst, '0')
		}
		return dst
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		return append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for ; n < 0; n++ {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	dst = appendMantissa(dst, digits)
	dst = append(dst, 'e')
	if n-1 >= 0 {
		dst = append(dst, '+')
	}
	return strconv.AppendInt(dst, n-1, 10)
}

func appendMantissa(dst, digits []byte) []byte {
	dst = append(dst, digits[0])
	if len(digits) > 1 {
		dst = append(dst, '.')
		dst = append(dst, digits[1:]...)
	}
	return dst
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// canonicalValue is a JSON value compiled for comparison with raw argument
// values on the call path.
type canonicalValue struct {
	kind byte   // '"' string, '0' number, 'l' true/false/null, '{' object or array
	text string // the decoded string, canonical number or literal
	json string // canonical JSON
}

func newCanonicalValue(raw messages.JSON) (canonicalValue, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return canonicalValue{}, err
	}
	c := canonicalValue{json: string(appendCanonical(nil, v))}
	switch x := v.(type) {
	case string:
		c.kind, c.text = '"', x
	case json.Number:
		c.kind, c.text = '0', c.json
	case nil, bool:
		c.kind, c.text = 'l', c.json
	default:
		c.kind = '{'
	}
	return c, nil
}

// equal compares the value with v, a value decodeJSON produced; only
// objects and arrays allocate.
func (c *canonicalValue) equal(v any) bool {
	switch x := v.(type) {
	case string:
		return c.kind == '"' && x == c.text
	case json.Number:
		if c.kind != '0' {
			return false
		}
		var buf [48]byte
		return string(appendNumber(buf[:0], string(x))) == c.text
	case nil:
		return c.kind == 'l' && c.text == "null"
	case bool:
		return c.kind == 'l' && c.text == strconv.FormatBool(x)
	}
	if c.kind != '{' {
		return false
	}
	return string(appendCanonical(nil, v)) == c.json
}
