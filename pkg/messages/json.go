package messages

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/toolbus/toolbus/internal/support/jsonparse"
)

// MaxJSONDepth is how deeply arrays and objects may nest in a JSON value:
// call arguments, schemas, structured results. A value is refused when it
// is decoded, in either encoding, if it nests deeper ([[1]] nests two
// levels), with a CodeBadRequest error; everything that walks a decoded
// value (schema validation, policy, discovery) can rely on the bound.
const MaxJSONDepth = jsonparse.MaxDepth

// errTooDeep refuses a value nested deeper than MaxJSONDepth.
var errTooDeep = &Error{Code: CodeBadRequest, Message: fmt.Sprintf("a JSON value nests arrays and objects deeper than %d levels", MaxJSONDepth)}

// errMessageTooDeep refuses a message whose maps and arrays, its own
// levels included, nest deeper than maxMessageDepth: met where a reader
// passes over a field it does not know, which may hold anything.
var errMessageTooDeep = &Error{Code: CodeBadRequest, Message: fmt.Sprintf("the message nests maps and arrays deeper than %d levels", maxMessageDepth)}

// CheckJSONDepth reports an error of code bad_request if the JSON text
// nests arrays and objects deeper than MaxJSONDepth. It reads only brackets
// and strings: the text is otherwise checked by whoever parses it. Decoding
// a message runs it on every JSON value; it is exported for values that
// reach a service without being decoded, such as arguments given to a Go API.
func CheckJSONDepth(data []byte) error {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '[', '{':
			if depth++; depth > MaxJSONDepth {
				return errTooDeep
			}
		case ']', '}':
			depth--
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		}
	}
	return nil
}

// JSON is a JSON value (tool arguments, schemas, structured results) that
// crosses the wire in its natural form: verbatim in JSON messages and as
// the equivalent MessagePack value (maps, arrays, numbers, strings) in
// MessagePack messages, so that a client in any language sends and reads
// plain values. Object key order survives both encodings. An empty JSON
// means "absent" and is encoded as null.
type JSON []byte

// MarshalJSON returns the value verbatim, or null when it is empty.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	if !json.Valid(j) {
		return nil, fmt.Errorf("messages.JSON holds invalid JSON")
	}
	return j, nil
}

// UnmarshalJSON keeps a copy of the value; null leaves it empty. A value
// nested deeper than MaxJSONDepth is refused.
func (j *JSON) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*j = nil
		return nil
	}
	if err := CheckJSONDepth(data); err != nil {
		return err
	}
	*j = append((*j)[:0], data...)
	return nil
}

// EncodeMsgpack writes the value as its MessagePack equivalent.
func (j JSON) EncodeMsgpack(enc *msgpack.Encoder) error {
	if len(j) == 0 {
		return enc.EncodeNil()
	}
	packed, err := appendJSONAsMsgpack(make([]byte, 0, len(j)+8), j)
	if err != nil {
		return fmt.Errorf("encode JSON value as MessagePack: %w", err)
	}
	_, err = enc.Writer().Write(packed)
	return err
}

// DecodeMsgpack reads any MessagePack value and keeps it as JSON, with
// decodeFast.
func (j *JSON) DecodeMsgpack(dec *msgpack.Decoder) error {
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	_, err = j.decodeBytes(raw)
	return err
}

func (j *JSON) decodeBytes(data []byte) (int, error) {
	d := reader{b: data}
	err := j.decodeFast(&d)
	return d.i, err
}

// decodeFast reads any MessagePack value and keeps it as JSON. Binary
// strings become base64 strings and timestamps RFC 3339 strings, since JSON
// has neither; nil leaves j empty.
func (j *JSON) decodeFast(d *reader) error {
	if d.nilNext() {
		*j = nil
		return nil
	}
	// Size the JSON from the MessagePack, so that it is allocated once
	// in most cases: a little longer, for quotes, commas and digits.
	start := d.i
	if err := d.skipWithin(-1); err != nil {
		return err
	}
	size := d.i - start
	d.i = start
	out, err := msgpackToJSON(d, make([]byte, 0, size+size/2+16), 0)
	if err != nil {
		return fmt.Errorf("decode MessagePack value as JSON: %w", err)
	}
	*j = out
	return nil
}

// msgpackToJSON appends the value at d as JSON; depth counts the maps and
// arrays around it.
func msgpackToJSON(d *reader, dst []byte, depth int) ([]byte, error) {
	c, err := d.next()
	if err != nil {
		return nil, err
	}
	switch {
	case c == msgpcode.Nil:
		return append(dst, "null"...), nil
	case c == msgpcode.True:
		return append(dst, "true"...), nil
	case c == msgpcode.False:
		return append(dst, "false"...), nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		if depth >= MaxJSONDepth {
			return nil, errTooDeep
		}
		n, err := d.mapLen(c)
		if err != nil {
			return nil, err
		}
		dst = append(dst, '{')
		for i := 0; i < n; i++ {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendMapKey(d, dst); err != nil {
				return nil, err
			}
			dst = append(dst, ':')
			if dst, err = msgpackToJSON(d, dst, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		if depth >= MaxJSONDepth {
			return nil, errTooDeep
		}
		n, err := d.arrayLen(c)
		if err != nil {
			return nil, err
		}
		dst = append(dst, '[')
		for i := 0; i < n; i++ {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = msgpackToJSON(d, dst, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case msgpcode.IsString(c):
		s, err := d.lenBytes(c)
		if err != nil {
			return nil, err
		}
		return appendJSONString(dst, s), nil
	case msgpcode.IsBin(c):
		b, err := d.lenBytes(c)
		if err != nil {
			return nil, err
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"'), nil
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := d.floatOf(c)
		if err != nil {
			return nil, err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("number %v has no JSON form", f)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64), nil
	case c == msgpcode.Uint64:
		u, err := d.uintN(8)
		if err != nil {
			return nil, err
		}
		return strconv.AppendUint(dst, u, 10), nil
	case msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64):
		i, err := d.intOf(c)
		if err != nil {
			return nil, err
		}
		return strconv.AppendInt(dst, i, 10), nil
	case msgpcode.IsExt(c):
		// The timestamp is the only extension registered with msgpack
		// here, so the only one Decoder.DecodeInterface used to read.
		n, err := d.extLen(c)
		if err != nil {
			return nil, err
		}
		typ, err := d.next()
		if err != nil {
			return nil, err
		}
		if int8(typ) != timeExt {
			return nil, fmt.Errorf("msgpack: unknown ext id=%d", int8(typ))
		}
		t, err := d.timeExt(n)
		if err != nil {
			return nil, err
		}
		return appendJSONString(dst, []byte(t.UTC().Format(time.RFC3339Nano))), nil
	}
	return nil, fmt.Errorf("unexpected MessagePack code 0x%x", c)
}

// appendMapKey appends a map key as a JSON string: a string, binary or
// integer key (in decimal) is taken, others are refused.
func appendMapKey(d *reader, dst []byte) ([]byte, error) {
	c, err := d.next()
	if err != nil {
		return nil, err
	}
	switch {
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		b, err := d.lenBytes(c)
		if err != nil {
			return nil, err
		}
		return appendJSONString(dst, b), nil
	case msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64):
		i, err := d.intOf(c)
		if err != nil {
			return nil, err
		}
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, i, 10)
		return append(dst, '"'), nil
	}
	return nil, fmt.Errorf("map key with MessagePack code 0x%x is not a string", c)
}

// appendJSONString appends s as encoding/json writes a string with HTML
// escaping off. Printable ASCII but '"' and '\\', and valid UTF-8 other than
// the two line separators it escapes, are copied as they are; a string
// with anything else is handed to encoding/json.
func appendJSONString(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' {
				return appendJSONStringSlow(dst, s)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			return appendJSONStringSlow(dst, s)
		}
		i += size
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendJSONStringSlow escapes s as encoding/json does, but for <, > and
// &, which only JSON put inside HTML needs escaped (see marshalJSON).
func appendJSONStringSlow(dst, s []byte) []byte {
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(string(s)) // a string always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
