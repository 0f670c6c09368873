package messages

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxJSONDepth bounds the nesting of a JSON value crossing between the two
// encodings, so that hostile input cannot exhaust the stack.
const maxJSONDepth = 256

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

// UnmarshalJSON keeps a copy of the value; null leaves it empty.
func (j *JSON) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*j = nil
		return nil
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

// DecodeMsgpack reads any MessagePack value and keeps it as JSON. Binary
// strings become base64 strings and timestamps RFC 3339 strings, since JSON
// has neither.
func (j *JSON) DecodeMsgpack(dec *msgpack.Decoder) error {
	code, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if code == msgpcode.Nil {
		*j = nil
		return dec.DecodeNil()
	}
	var buf bytes.Buffer
	if err := msgpackToJSON(dec, &buf, 0); err != nil {
		return fmt.Errorf("decode MessagePack value as JSON: %w", err)
	}
	*j = buf.Bytes()
	return nil
}

func msgpackToJSON(dec *msgpack.Decoder, buf *bytes.Buffer, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("nested too deeply")
	}
	code, err := dec.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case code == msgpcode.Nil:
		buf.WriteString("null")
		return dec.DecodeNil()
	case code == msgpcode.True || code == msgpcode.False:
		b, err := dec.DecodeBool()
		if err != nil {
			return err
		}
		buf.WriteString(strconv.FormatBool(b))
		return nil
	case msgpcode.IsFixedMap(code) || code == msgpcode.Map16 || code == msgpcode.Map32:
		n, err := dec.DecodeMapLen()
		if err != nil {
			return err
		}
		buf.WriteByte('{')
		for i := 0; i < n; i++ {
			if i > 0 {
				buf.WriteByte(',')
			}
			key, err := decodeMapKey(dec)
			if err != nil {
				return err
			}
			writeJSONString(buf, key)
			buf.WriteByte(':')
			if err := msgpackToJSON(dec, buf, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
		return nil
	case msgpcode.IsFixedArray(code) || code == msgpcode.Array16 || code == msgpcode.Array32:
		n, err := dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		buf.WriteByte('[')
		for i := 0; i < n; i++ {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := msgpackToJSON(dec, buf, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	case msgpcode.IsString(code):
		s, err := dec.DecodeString()
		if err != nil {
			return err
		}
		writeJSONString(buf, s)
		return nil
	case code == msgpcode.Bin8 || code == msgpcode.Bin16 || code == msgpcode.Bin32:
		b, err := dec.DecodeBytes()
		if err != nil {
			return err
		}
		writeJSONString(buf, base64.StdEncoding.EncodeToString(b))
		return nil
	case code == msgpcode.Float || code == msgpcode.Double:
		f, err := dec.DecodeFloat64()
		if err != nil {
			return err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("number %v has no JSON form", f)
		}
		buf.Write(strconv.AppendFloat(nil, f, 'g', -1, 64))
		return nil
	case code == msgpcode.Uint64:
		u, err := dec.DecodeUint64()
		if err != nil {
			return err
		}
		buf.WriteString(strconv.FormatUint(u, 10))
		return nil
	case msgpcode.IsFixedNum(code) || (code >= msgpcode.Uint8 && code <= msgpcode.Int64):
		i, err := dec.DecodeInt64()
		if err != nil {
			return err
		}
		buf.WriteString(strconv.FormatInt(i, 10))
		return nil
	case msgpcode.IsExt(code):
		v, err := dec.DecodeInterface()
		if err != nil {
			return err
		}
		if t, ok := v.(time.Time); ok {
			writeJSONString(buf, t.UTC().Format(time.RFC3339Nano))
			return nil
		}
		return fmt.Errorf("MessagePack extension %T has no JSON form", v)
	}
	return fmt.Errorf("unexpected MessagePack code 0x%x", code)
}

func decodeMapKey(dec *msgpack.Decoder) (string, error) {
	code, err := dec.PeekCode()
	if err != nil {
		return "", err
	}
	if msgpcode.IsString(code) {
		return dec.DecodeString()
	}
	if code == msgpcode.Bin8 || code == msgpcode.Bin16 || code == msgpcode.Bin32 {
		b, err := dec.DecodeBytes()
		return string(b), err
	}
	if msgpcode.IsFixedNum(code) || (code >= msgpcode.Uint8 && code <= msgpcode.Int64) {
		i, err := dec.DecodeInt64()
		return strconv.FormatInt(i, 10), err
	}
	return "", fmt.Errorf("map key with MessagePack code 0x%x is not a string", code)
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always marshals
	buf.Write(b)
}
