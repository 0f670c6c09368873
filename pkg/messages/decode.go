package messages

import (
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The messages read on every call have generated MessagePack decoders
// (msgpack_gen.go), for the same reason as their encoders (encode.go).
// Each type has one decoder, decodeFast, on a reader (reader.go):
// Codec.Unmarshal calls it directly, and the type's DecodeMsgpack, which
// msgpack.Unmarshal and reflection-decoded messages holding the type use,
// hands it the raw value. Unknown keys are skipped, as reflection does;
// decode_test.go checks that they read what reflection reads. Below are
// the parts of those decoders that are not generated.

// decodeVia reads the value dec holds next with v's fast decoder.
func decodeVia(dec *msgpack.Decoder, v fastDecoder) error {
	code, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if msgpcode.IsExt(code) {
		// The map behind an extension header, as reader.mapHeader reads
		// it; DecodeRaw would take the extension's data instead.
		if _, _, err := dec.DecodeExtHeader(); err != nil {
			return err
		}
		if code, err = dec.PeekCode(); err != nil {
			return err
		}
		if msgpcode.IsExt(code) {
			return invalidCode(code, "map length")
		}
	}
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	_, err = v.decodeBytes(raw)
	return err
}

// fieldError names the field whose value could not be read; a key that is
// not printable ASCII is quoted.
func fieldError(key []byte, err error) error {
	for _, c := range key {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("%q: %w", key, err)
		}
	}
	return fmt.Errorf("%s: %w", key, err)
}

// itemError names the item of a list that could not be read.
func itemError(i int, err error) error { return fmt.Errorf("item %d: %w", i, err) }

// maxListLen is the most items a list of messages may hold.
const maxListLen = 1 << 16

// listLen checks the length of a list of messages before it is allocated.
func listLen(d *reader, n int) error {
	if n > maxListLen {
		return fmt.Errorf("%d items, more than %d", n, maxListLen)
	}
	if n > len(d.b)-d.i {
		return errTruncated // an item takes a byte at least
	}
	return nil
}

// finite refuses a number that JSON cannot hold.
func finite(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%v is not a finite number", f)
	}
	return nil
}
