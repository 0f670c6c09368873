package messages

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/toolbus/toolbus/internal/support/jsonparse"
)

// appendJSONAsMsgpack appends the MessagePack form of one JSON value.
// It runs for every call's arguments, so it works on the bytes directly,
// with the scanner of jsonparse, rather than through a tokenizer that
// allocates for each token.
func appendJSONAsMsgpack(dst, src []byte) ([]byte, error) {
	p := jsonPacker{jsonparse.Parser{Data: src}}
	p.Space()
	dst, err := p.value(dst, 0)
	if err != nil {
		return nil, err
	}
	p.Space()
	if p.Pos != len(p.Data) {
		return nil, fmt.Errorf("trailing data at offset %d", p.Pos)
	}
	return dst, nil
}

type jsonPacker struct{ jsonparse.Parser }

// value packs the value at Pos; depth counts the arrays and objects around it.
func (p *jsonPacker) value(dst []byte, depth int) ([]byte, error) {
	if p.Pos >= len(p.Data) {
		return nil, p.Fail("a value")
	}
	switch c := p.Data[p.Pos]; {
	case c == '{':
		return p.container(dst, depth, '}', true)
	case c == '[':
		return p.container(dst, depth, ']', false)
	case c == '"':
		s, err := p.StringBytes()
		if err != nil {
			return nil, err
		}
		return appendMsgpackString(dst, s), nil
	case c == 't':
		return append(dst, 0xc3), p.Literal("true")
	case c == 'f':
		return append(dst, 0xc2), p.Literal("false")
	case c == 'n':
		return append(dst, 0xc0), p.Literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number(dst)
	default:
		return nil, p.Fail("a value")
	}
}

// container packs an object or array. Its element count comes before its
// elements in MessagePack, so the elements are written after room for the
// largest header, and moved back once the count is known.
func (p *jsonPacker) container(dst []byte, depth int, closing byte, object bool) ([]byte, error) {
	if err := p.Deeper(depth + 1); err != nil {
		return nil, errTooDeep
	}
	p.Pos++ // the opening bracket
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	n := 0
	p.Space()
	if p.Pos < len(p.Data) && p.Data[p.Pos] == closing {
		p.Pos++
	} else {
		for {
			var err error
			if object {
				key, err := p.StringBytes()
				if err != nil {
					return nil, err
				}
				dst = appendMsgpackString(dst, key)
				if err := p.Colon(); err != nil {
					return nil, err
				}
			}
			if dst, err = p.value(dst, depth+1); err != nil {
				return nil, err
			}
			n++
			p.Space()
			if p.Pos < len(p.Data) && p.Data[p.Pos] == ',' {
				p.Pos++
				p.Space()
				continue
			}
			if p.Pos >= len(p.Data) || p.Data[p.Pos] != closing {
				return nil, p.Fail(fmt.Sprintf("',' or '%c'", closing))
			}
			p.Pos++
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

func (p *jsonPacker) number(dst []byte) ([]byte, error) {
	num, err := p.NumberBytes()
	if err != nil {
		return nil, err
	}
	integer := !bytes.ContainsAny(num, ".eE")
	if integer {
		if i, ok := smallInt(num); ok {
			return appendMsgpackInt(dst, i), nil
		}
	}
	text := string(num)
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
