package messages

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// appendJSONAsMsgpack appends the MessagePack form of one JSON value.
// It runs for every call's arguments, so it works on the bytes directly
// rather than through a tokenizer that allocates for each token.
func appendJSONAsMsgpack(dst, src []byte) ([]byte, error) {
	p := jsonPacker{src: src}
	dst, err := p.value(dst, 0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.src) {
		return nil, fmt.Errorf("trailing data at offset %d", p.i)
	}
	return dst, nil
}

type jsonPacker struct {
	src []byte
	i   int
}

var errJSONEnd = errors.New("unexpected end of JSON")

func (p *jsonPacker) space() {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value packs the value at p.i; depth counts the arrays and objects around it.
func (p *jsonPacker) value(dst []byte, depth int) ([]byte, error) {
	p.space()
	if p.i >= len(p.src) {
		return nil, errJSONEnd
	}
	switch c := p.src[p.i]; {
	case c == '{':
		return p.container(dst, depth, '}', true)
	case c == '[':
		return p.container(dst, depth, ']', false)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return appendMsgpackString(dst, s), nil
	case c == 't':
		return p.literal(dst, "true", 0xc3)
	case c == 'f':
		return p.literal(dst, "false", 0xc2)
	case c == 'n':
		return p.literal(dst, "null", 0xc0)
	case c == '-' || '0' <= c && c <= '9':
		return p.number(dst)
	default:
		return nil, fmt.Errorf("unexpected %q at offset %d", c, p.i)
	}
}

func (p *jsonPacker) literal(dst []byte, word string, code byte) ([]byte, error) {
	if len(p.src)-p.i < len(word) || string(p.src[p.i:p.i+len(word)]) != word {
		return nil, fmt.Errorf("invalid literal at offset %d", p.i)
	}
	p.i += len(word)
	return append(dst, code), nil
}

// container packs an object or array. Its element count comes before its
// elements in MessagePack, so the elements are written after room for the
// largest header, and moved back once the count is known.
func (p *jsonPacker) container(dst []byte, depth int, closing byte, object bool) ([]byte, error) {
	if depth >= MaxJSONDepth {
		return nil, errTooDeep
	}
	p.i++ // the opening bracket
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	n := 0
	p.space()
	if p.i < len(p.src) && p.src[p.i] == closing {
		p.i++
	} else {
		for {
			var err error
			if object {
				p.space()
				if p.i >= len(p.src) || p.src[p.i] != '"' {
					return nil, fmt.Errorf("expected a member name at offset %d", p.i)
				}
				key, err := p.str()
				if err != nil {
					return nil, err
				}
				dst = appendMsgpackString(dst, key)
				p.space()
				if p.i >= len(p.src) || p.src[p.i] != ':' {
					return nil, fmt.Errorf("expected ':' at offset %d", p.i)
				}
				p.i++
			}
			if dst, err = p.value(dst, depth+1); err != nil {
				return nil, err
			}
			n++
			p.space()
			if p.i >= len(p.src) {
				return nil, errJSONEnd
			}
			if p.src[p.i] == ',' {
				p.i++
				continue
			}
			if p.src[p.i] != closing {
				return nil, fmt.Errorf("expected ',' or %q at offset %d", closing, p.i)
			}
			p.i++
			break
		}
	}
	var header []byte
	var buf [5]byte
	switch {
	case n <= 15 && object:
		buf[0], header = 0x80|byte(n), buf[:1]
	case n <= 15:
		buf[0], header = 0x90|byte(n), buf[:1]
	case n <= math.MaxUint16:
		buf[0] = 0xdc
		if object {
			buf[0] = 0xde
		}
		binary.BigEndian.PutUint16(buf[1:], uint16(n))
		header = buf[:3]
	default:
		buf[0] = 0xdd
		if object {
			buf[0] = 0xdf
		}
		binary.BigEndian.PutUint32(buf[1:], uint32(n))
		header = buf[:5]
	}
	copy(dst[start:], header)
	if gap := 5 - len(header); gap > 0 {
		copy(dst[start+len(header):], dst[start+5:])
		dst = dst[:len(dst)-gap]
	}
	return dst, nil
}

// str reads a string; only a string with escapes is handed to encoding/json.
func (p *jsonPacker) str() ([]byte, error) {
	start := p.i
	p.i++
	escaped := false
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '"':
			p.i++
			if !escaped {
				return p.src[start+1 : p.i-1], nil
			}
			var s string
			if err := json.Unmarshal(p.src[start:p.i], &s); err != nil {
				return nil, fmt.Errorf("invalid string at offset %d: %w", start, err)
			}
			return []byte(s), nil
		case c == '\\':
			escaped = true
			p.i += 2
		case c < 0x20:
			return nil, fmt.Errorf("control character in string at offset %d", p.i)
		default:
			p.i++
		}
	}
	return nil, errJSONEnd
}

func (p *jsonPacker) number(dst []byte) ([]byte, error) {
	start := p.i
	integer := true
	for p.i < len(p.src) {
		c := p.src[p.i]
		if '0' <= c && c <= '9' || c == '-' || c == '+' {
			p.i++
			continue
		}
		if c == '.' || c == 'e' || c == 'E' {
			integer = false
			p.i++
			continue
		}
		break
	}
	if !json.Valid(p.src[start:p.i]) {
		return nil, fmt.Errorf("invalid number %q at offset %d", p.src[start:p.i], start)
	}
	if integer {
		if i, ok := smallInt(p.src[start:p.i]); ok {
			return appendMsgpackInt(dst, i), nil
		}
	}
	text := string(p.src[start:p.i])
	if integer && text != "-0" {
		if i, err := strconv.ParseInt(text, 10, 64); err == nil {
			return appendMsgpackInt(dst, i), nil
		}
		if u, err := strconv.ParseUint(text, 10, 64); err == nil {
			return binary.BigEndian.AppendUint64(append(dst, 0xcf), u), nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, fmt.Errorf("number %s: %w", text, err)
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(f)), nil
}

// smallInt reads a valid JSON integer of at most 18 digits, without
// strconv, which would need it as a string. "-0" is left to the float path.
func smallInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 || neg && len(b) == 1 && b[0] == '0' {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func appendMsgpackInt(dst []byte, i int64) []byte {
	switch {
	case i >= 0 && i <= 127, i < 0 && i >= -32:
		return append(dst, byte(i))
	case i >= math.MinInt8 && i <= math.MaxInt8:
		return append(dst, 0xd0, byte(i))
	case i >= math.MinInt16 && i <= math.MaxInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(i))
	case i >= math.MinInt32 && i <= math.MaxInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(i))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(i))
}

func appendMsgpackString(dst, s []byte) []byte {
	n := len(s)
	switch {
	case n <= 31:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}
