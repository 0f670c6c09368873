package messages

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// reader reads MessagePack values from a byte slice. It is what the
// generated decoders (msgpack_gen.go) are written on: it reads every value as
// msgpack.Decoder reads it (the same codes accepted for each kind, nil as
// the zero value where the Decoder takes it so) without the Decoder's
// buffering and interface calls, and allocates only for the strings and
// byte slices it returns.
type reader struct {
	b []byte
	i int
	// depth is how many maps of messages the fast decoders are inside.
	depth int
}

// fastDecoder is implemented by the messages decoded with a reader, by a
// method decodeFast(*reader) error that reads one value (nil leaves the
// message as it is). decodeBytes runs it on the value at the start of b and
// returns the value's length; the reader is not handed over through the
// interface, so that it stays on the stack.
type fastDecoder interface {
	decodeBytes(b []byte) (int, error)
}

var errTruncated = io.ErrUnexpectedEOF

func invalidCode(c byte, decoding string) error {
	return fmt.Errorf("msgpack: invalid code=%x decoding %s", c, decoding)
}

func (d *reader) next() (byte, error) {
	if d.i >= len(d.b) {
		return 0, errTruncated
	}
	c := d.b[d.i]
	d.i++
	return c, nil
}

// take returns the next n bytes, without copying them.
func (d *reader) take(n int) ([]byte, error) {
	if n < 0 || n > len(d.b)-d.i {
		return nil, errTruncated
	}
	b := d.b[d.i : d.i+n : d.i+n]
	d.i += n
	return b, nil
}

// uintN reads an unsigned big-endian integer of n bytes: 2, 4 or 8.
func (d *reader) uintN(n int) (uint64, error) {
	b, err := d.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

// nilNext consumes a nil value and reports whether there was one, so that
// a nil pointer field stays nil.
func (d *reader) nilNext() bool {
	if d.i < len(d.b) && d.b[d.i] == msgpcode.Nil {
		d.i++
		return true
	}
	return false
}

// mapHeader reads a map's length: -1 for nil. Like Decoder.DecodeMapLen it
// passes over an extension header in front of the map.
func (d *reader) mapHeader() (int, error) {
	c, err := d.next()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsExt(c) {
		if _, err := d.take(1 + extHeaderLen(c)); err != nil {
			return 0, err
		}
		if c, err = d.next(); err != nil {
			return 0, err
		}
	}
	return d.mapLen(c)
}

func (d *reader) mapLen(c byte) (int, error) {
	switch {
	case c == msgpcode.Nil:
		return -1, nil
	case msgpcode.IsFixedMap(c):
		return int(c & msgpcode.FixedMapMask), nil
	case c == msgpcode.Map16:
		n, err := d.uintN(2)
		return int(n), err
	case c == msgpcode.Map32:
		n, err := d.uintN(4)
		return int(n), err
	}
	return 0, invalidCode(c, "map length")
}

// arrayHeader reads an array's length: -1 for nil.
func (d *reader) arrayHeader() (int, error) {
	c, err := d.next()
	if err != nil {
		return 0, err
	}
	return d.arrayLen(c)
}

func (d *reader) arrayLen(c byte) (int, error) {
	switch {
	case c == msgpcode.Nil:
		return -1, nil
	case msgpcode.IsFixedArray(c):
		return int(c & msgpcode.FixedArrayMask), nil
	case c == msgpcode.Array16:
		n, err := d.uintN(2)
		return int(n), err
	case c == msgpcode.Array32:
		n, err := d.uintN(4)
		return int(n), err
	}
	return 0, invalidCode(c, "array length")
}

// bytesLen reads the length of a string or binary value: -1 for nil.
func (d *reader) bytesLen(c byte) (int, error) {
	switch {
	case c == msgpcode.Nil:
		return -1, nil
	case msgpcode.IsFixedString(c):
		return int(c & msgpcode.FixedStrMask), nil
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		n, err := d.next()
		return int(n), err
	case c == msgpcode.Str16 || c == msgpcode.Bin16:
		n, err := d.uintN(2)
		return int(n), err
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		n, err := d.uintN(4)
		return int(n), err
	}
	return 0, invalidCode(c, "string/bytes length")
}

// lenBytes reads the bytes of the string or binary value of code c
// (not nil), without copying them.
func (d *reader) lenBytes(c byte) ([]byte, error) {
	n, err := d.bytesLen(c)
	if err != nil {
		return nil, err
	}
	return d.take(n)
}

// key reads a string or binary value without copying it; nil reads as
// empty. Map keys are read with it and compared in place.
func (d *reader) key() ([]byte, error) {
	c, err := d.next()
	if err != nil {
		return nil, err
	}
	n, err := d.bytesLen(c)
	if err != nil || n <= 0 {
		return nil, err
	}
	return d.take(n)
}

// str reads a string (or binary) value; nil reads as "".
func (d *reader) str() (string, error) {
	b, err := d.key()
	if len(b) == 0 {
		return "", err
	}
	return string(b), err
}

// strOf reads a string, and returns the one in known that equals it
// rather than a new copy.
func (d *reader) strOf(known []string) (string, error) {
	b, err := d.key()
	if len(b) == 0 {
		return "", err
	}
	for _, k := range known {
		if string(b) == k {
			return k, nil
		}
	}
	return string(b), nil
}

// bytes reads a binary (or string) value into a new slice; nil reads as a
// nil slice and an empty value as an empty one.
func (d *reader) bytes() ([]byte, error) {
	c, err := d.next()
	if err != nil {
		return nil, err
	}
	n, err := d.bytesLen(c)
	if err != nil || n < 0 {
		return nil, err
	}
	b, err := d.take(n)
	if err != nil {
		return nil, err
	}
	return append([]byte{}, b...), nil
}

func (d *reader) bool() (bool, error) {
	c, err := d.next()
	if err != nil {
		return false, err
	}
	switch c {
	case msgpcode.Nil, msgpcode.False:
		return false, nil
	case msgpcode.True:
		return true, nil
	}
	return false, invalidCode(c, "bool")
}

// int reads an integer of any width, signed or not, as int64 (a uint64
// above MaxInt64 wraps, as Decoder.DecodeInt64 has it); nil reads as 0.
func (d *reader) int() (int64, error) {
	c, err := d.next()
	if err != nil {
		return 0, err
	}
	return d.intOf(c)
}

func (d *reader) intOf(c byte) (int64, error) {
	if msgpcode.IsFixedNum(c) {
		return int64(int8(c)), nil
	}
	switch c {
	case msgpcode.Nil:
		return 0, nil
	case msgpcode.Uint8:
		n, err := d.next()
		return int64(n), err
	case msgpcode.Int8:
		n, err := d.next()
		return int64(int8(n)), err
	case msgpcode.Uint16:
		n, err := d.uintN(2)
		return int64(n), err
	case msgpcode.Int16:
		n, err := d.uintN(2)
		return int64(int16(n)), err
	case msgpcode.Uint32:
		n, err := d.uintN(4)
		return int64(n), err
	case msgpcode.Int32:
		n, err := d.uintN(4)
		return int64(int32(n)), err
	case msgpcode.Uint64, msgpcode.Int64:
		n, err := d.uintN(8)
		return int64(n), err
	}
	return 0, invalidCode(c, "int64")
}

// float reads a float32, float64 or integer as float64; nil reads as 0.
func (d *reader) float() (float64, error) {
	c, err := d.next()
	if err != nil {
		return 0, err
	}
	return d.floatOf(c)
}

func (d *reader) floatOf(c byte) (float64, error) {
	switch c {
	case msgpcode.Float:
		n, err := d.uintN(4)
		return float64(math.Float32frombits(uint32(n))), err
	case msgpcode.Double:
		n, err := d.uintN(8)
		return math.Float64frombits(n), err
	}
	n, err := d.intOf(c)
	if err != nil {
		return 0, invalidCode(c, "float64")
	}
	return float64(n), nil
}

// extHeaderLen is the number of length bytes after an extension's code.
func extHeaderLen(c byte) int {
	switch c {
	case msgpcode.Ext8:
		return 1
	case msgpcode.Ext16:
		return 2
	case msgpcode.Ext32:
		return 4
	}
	return 0
}

// extLen reads the length of an extension's data, which follows its type.
func (d *reader) extLen(c byte) (int, error) {
	switch c {
	case msgpcode.FixExt1:
		return 1, nil
	case msgpcode.FixExt2:
		return 2, nil
	case msgpcode.FixExt4:
		return 4, nil
	case msgpcode.FixExt8:
		return 8, nil
	case msgpcode.FixExt16:
		return 16, nil
	case msgpcode.Ext8:
		n, err := d.next()
		return int(n), err
	case msgpcode.Ext16:
		n, err := d.uintN(2)
		return int(n), err
	case msgpcode.Ext32:
		n, err := d.uintN(4)
		return int(n), err
	}
	return 0, invalidCode(c, "ext len")
}

// timeExt is the extension type of MessagePack timestamps.
const timeExt = -1

// time reads a time as Decoder.DecodeTime does, and refuses one that JSON
// cannot hold (years 0 to 9999): the timestamp extension
// in its 32-, 64- and 96-bit forms (msgpack.Encoder writes whichever is
// shortest; the 96-bit one in an ext 8), also under type 13, which NodeJS
// uses; an RFC 3339 string; or the legacy array [seconds, nanoseconds].
func (d *reader) time() (t time.Time, err error) {
	c, err := d.next()
	if err != nil {
		return t, err
	}
	switch {
	case c == msgpcode.FixedArrayLow|2:
		var sec, nsec int64
		if sec, err = d.int(); err == nil {
			nsec, err = d.int()
		}
		t = time.Unix(sec, nsec)
	case msgpcode.IsString(c):
		var b []byte
		if b, err = d.lenBytes(c); err == nil {
			t, err = time.Parse(time.RFC3339Nano, string(b))
		}
	default:
		var n int
		var typ byte
		if n, err = d.extLen(c); err == nil {
			typ, err = d.next()
		}
		switch {
		case err != nil:
		case int8(typ) != timeExt && typ != 13:
			err = fmt.Errorf("msgpack: invalid time ext id=%d", int8(typ))
		default:
			t, err = d.timeExt(n)
		}
	}
	if err == nil {
		err = checkYear(t)
	}
	if err != nil {
		return time.Time{}, err
	}
	return t, nil
}

// timeExt reads the n bytes of a timestamp extension.
func (d *reader) timeExt(n int) (time.Time, error) {
	b, err := d.take(n)
	if err != nil {
		return time.Time{}, err
	}
	var t time.Time
	switch n {
	case 4:
		t = time.Unix(int64(binary.BigEndian.Uint32(b)), 0)
	case 8:
		v := binary.BigEndian.Uint64(b)
		t = time.Unix(int64(v&(1<<34-1)), int64(v>>34))
	case 12:
		t = time.Unix(int64(binary.BigEndian.Uint64(b[4:])), int64(binary.BigEndian.Uint32(b)))
	default:
		return time.Time{}, fmt.Errorf("msgpack: invalid ext len=%d decoding time", n)
	}
	if t.IsZero() {
		t = t.UTC() // the zero time has no zone
	}
	return t, nil
}

// enter opens a map or array of n values in skipWithin's open levels.
func enter(open []int, n, maxDepth int) ([]int, error) {
	if maxDepth < 0 || n == 0 {
		return open, nil
	}
	if len(open) >= maxDepth {
		return open, errMessageTooDeep
	}
	return append(open, n), nil
}

func checkYear(t time.Time) error {
	if y := t.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("time %v is out of range", t)
	}
	return nil
}

// skipWithin passes over one value of any kind. It counts the values
// still to pass rather than recursing, so nesting costs no stack; as
// every value takes a byte at least, more of them than bytes left is a
// truncation. It also refuses, with errMessageTooDeep, a value whose
// maps and arrays nest deeper than maxDepth (none when negative): a
// reader that recurses (msgpack.Decoder, when it skips a field it does
// not know) would otherwise spend a stack frame per level, some 160 bytes
// for each byte of the message.
func (d *reader) skipWithin(maxDepth int) error {
	// open holds the values still to pass in each map or array being
	// passed, innermost last; only kept when the depth is bounded.
	var open []int
	for pending := 1; pending > 0; {
		pending--
		if maxDepth >= 0 {
			for len(open) > 0 && open[len(open)-1] == 0 {
				open = open[:len(open)-1]
			}
			if len(open) > 0 {
				open[len(open)-1]--
			}
		}
		c, err := d.next()
		if err != nil {
			return err
		}
		n := 0
		switch {
		case msgpcode.IsFixedNum(c), c == msgpcode.Nil, c == msgpcode.False, c == msgpcode.True:
		case msgpcode.IsFixedMap(c), c == msgpcode.Map16, c == msgpcode.Map32:
			if n, err = d.mapLen(c); err != nil {
				return err
			}
			if open, err = enter(open, 2*n, maxDepth); err != nil {
				return err
			}
			pending += 2 * n
			n = 0
		case msgpcode.IsFixedArray(c), c == msgpcode.Array16, c == msgpcode.Array32:
			if n, err = d.arrayLen(c); err != nil {
				return err
			}
			if open, err = enter(open, n, maxDepth); err != nil {
				return err
			}
			pending += n
			n = 0
		case msgpcode.IsString(c), msgpcode.IsBin(c):
			n, err = d.bytesLen(c)
		case c == msgpcode.Uint8, c == msgpcode.Int8:
			n = 1
		case c == msgpcode.Uint16, c == msgpcode.Int16:
			n = 2
		case c == msgpcode.Uint32, c == msgpcode.Int32, c == msgpcode.Float:
			n = 4
		case c == msgpcode.Uint64, c == msgpcode.Int64, c == msgpcode.Double:
			n = 8
		case msgpcode.IsExt(c):
			n, err = d.extLen(c)
			n++ // the type
		default:
			return fmt.Errorf("msgpack: unknown code %x", c)
		}
		if err != nil {
			return err
		}
		if _, err := d.take(n); err != nil {
			return err
		}
		if pending < 0 || pending > len(d.b)-d.i {
			return errTruncated
		}
	}
	return nil
}

// raw returns the next value's bytes, without copying them.
func (d *reader) raw() ([]byte, error) {
	start := d.i
	if err := d.skipWithin(-1); err != nil {
		return nil, err
	}
	return d.b[start:d.i:d.i], nil
}
