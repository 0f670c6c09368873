package messages

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The messages of the call path, which are encoded several times per
// call, have generated MessagePack encoders (msgpack_gen.go, written by
// internal/msgpackgen from the structs): reflection-driven encoding
// allocates for every struct with optional fields. Each writes the same
// map that reflection would from the json tags (encode_test.go checks
// that), so decoding needs nothing special. Below is what they write with.

// packer appends MessagePack to a byte slice, as msgpack.Encoder (with
// compact integers) would write it, without its per-value overhead.
type packer struct {
	b   []byte
	err error
}

// msgpackAppender is a message with a generated encoder.
type msgpackAppender interface {
	appendMsgpack(w *packer)
}

// encodeVia writes v's generated encoding to enc, for when v is nested
// in a value that the msgpack library encodes.
func encodeVia(enc *msgpack.Encoder, v msgpackAppender) error {
	w := packer{}
	v.appendMsgpack(&w)
	if w.err != nil {
		return w.err
	}
	_, err := enc.Writer().Write(w.b)
	return err
}

var packers = sync.Pool{New: func() any { return &packer{b: make([]byte, 0, 1024)} }}

// appendMarshal encodes v with a pooled packer and returns a copy the size of the encoding.
func appendMarshal(v msgpackAppender) ([]byte, error) {
	w := packers.Get().(*packer)
	w.b, w.err = w.b[:0], nil
	v.appendMsgpack(w)
	out, err := bytes.Clone(w.b), w.err
	if err != nil {
		out = nil
	}
	if cap(w.b) <= maxPooledBuffer {
		packers.Put(w)
	}
	return out, err
}

func (w *packer) putNil() { w.b = append(w.b, msgpcode.Nil) }

func (w *packer) header(n int) { w.b = appendLen(w.b, n, 0x80, 15, msgpcode.Map16, msgpcode.Map32) }

func (w *packer) arrayLen(n int) {
	w.b = appendLen(w.b, n, 0x90, 15, msgpcode.Array16, msgpcode.Array32)
}

// appendLen writes a map or array length: in the fixed code when it fits,
// else in 2 or 4 bytes after code16 or code32.
func appendLen(b []byte, n int, fixed byte, maxFixed int, code16, code32 byte) []byte {
	switch {
	case n <= maxFixed:
		return append(b, fixed|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, code16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, code32), uint32(n))
	}
}

func (w *packer) putStr(s string) {
	switch n := len(s); {
	case n < 32:
		w.b = append(w.b, msgpcode.FixedStrLow|byte(n))
	case n < 256:
		w.b = append(w.b, msgpcode.Str8, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, msgpcode.Str16), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.Str32), uint32(n))
	}
	w.b = append(w.b, s...)
}

func (w *packer) putInt(n int64) {
	switch {
	case n >= 0 && n <= math.MaxInt8:
		w.b = append(w.b, byte(n))
	case n >= 0 && n <= math.MaxUint8:
		w.b = append(w.b, msgpcode.Uint8, byte(n))
	case n >= 0 && n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, msgpcode.Uint16), uint16(n))
	case n >= 0 && n <= math.MaxUint32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.Uint32), uint32(n))
	case n >= 0:
		w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.Uint64), uint64(n))
	case n >= -32:
		w.b = append(w.b, byte(n))
	case n >= math.MinInt8:
		w.b = append(w.b, msgpcode.Int8, byte(n))
	case n >= math.MinInt16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, msgpcode.Int16), uint16(n))
	case n >= math.MinInt32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.Int32), uint32(n))
	default:
		w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.Int64), uint64(n))
	}
}

// putUint writes n as the library's compact integers do: as the int64 it
// equals when it fits one.
func (w *packer) putUint(n uint64) {
	if n <= math.MaxInt64 {
		w.putInt(int64(n))
		return
	}
	w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.Uint64), n)
}

func (w *packer) putBool(v bool) {
	if v {
		w.b = append(w.b, msgpcode.True)
	} else {
		w.b = append(w.b, msgpcode.False)
	}
}

func (w *packer) putFloat(f float64) {
	w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.Double), math.Float64bits(f))
}

// putTime writes the timestamp extension (-1) in its 4, 8 or 12 byte form.
func (w *packer) putTime(t time.Time) {
	secs := uint64(t.Unix())
	if secs>>34 == 0 {
		data := uint64(t.Nanosecond())<<34 | secs
		if data&0xffffffff00000000 == 0 {
			w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.FixExt4, 0xff), uint32(data))
			return
		}
		w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.FixExt8, 0xff), data)
		return
	}
	w.b = append(w.b, msgpcode.Ext8, 12, 0xff)
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(t.Nanosecond()))
	w.b = binary.BigEndian.AppendUint64(w.b, secs)
}

func (w *packer) putBin(v []byte) {
	switch n := len(v); {
	case n < 256:
		w.b = append(w.b, msgpcode.Bin8, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, msgpcode.Bin16), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.Bin32), uint32(n))
	}
	w.b = append(w.b, v...)
}

func (w *packer) putJSON(j JSON) {
	if w.err != nil {
		return
	}
	if len(j) == 0 {
		w.b = append(w.b, msgpcode.Nil)
		return
	}
	b, err := appendJSONAsMsgpack(w.b, j)
	if err != nil {
		w.err = fmt.Errorf("encode JSON value as MessagePack: %w", err)
		return
	}
	w.b = b
}

// putReflect writes a value that has no generated encoder, with the
// msgpack library: messages off the hot path.
func (w *packer) putReflect(v any) {
	if w.err != nil {
		return
	}
	data, err := encodeReflect(v)
	if err != nil {
		w.err = err
		return
	}
	w.b = append(w.b, data...)
}

// count is how many of the optional fields of a message are present.
func count(present ...bool) int {
	n := 0
	for _, p := range present {
		if p {
			n++
		}
	}
	return n
}
