package messages

import (
	"strings"
	"testing"
)

// nested returns n arrays, one inside the other, around the number 1.
func nested(n int) JSON {
	return JSON(strings.Repeat("[", n) + "1" + strings.Repeat("]", n))
}

// Arguments nested MaxJSONDepth levels deep are decoded; one level more is
// refused as bad_request, in either encoding, before anything walks them.
func TestArgumentsDepthLimitAtDecode(t *testing.T) {
	t.Parallel()
	for _, c := range []Codec{Msgpack, JSONCodec} {
		for _, tc := range []struct {
			depth int
			code  ErrorCode // empty: decoded
		}{
			{MaxJSONDepth, ""},
			{MaxJSONDepth + 1, CodeBadRequest},
		} {
			args := nested(tc.depth)
			var data []byte
			if c == JSONCodec {
				data = []byte(`{"tool":"a-b","arguments":` + string(args) + `}`)
			} else {
				data = mustMsgpackFromJSON(t, args)
			}
			var req SubmitRequest
			_, err := Decode(c.NewHeader(), data, &req)
			switch {
			case tc.code == "" && err != nil:
				t.Errorf("%s, %d levels: %v", c.ContentType(), tc.depth, err)
			case tc.code == "" && string(req.Arguments) != string(args):
				t.Errorf("%s, %d levels: arguments %s", c.ContentType(), tc.depth, req.Arguments)
			case tc.code != "" && CodeOf(err) != tc.code:
				t.Errorf("%s, %d levels: %v, want code %s", c.ContentType(), tc.depth, err, tc.code)
			}
		}
	}
}

// mustMsgpackFromJSON encodes a SubmitRequest whose arguments are args,
// packing them without the depth check, as a hostile peer could.
func mustMsgpackFromJSON(t *testing.T, args JSON) []byte {
	t.Helper()
	// {"tool": "a-b", "arguments": args}
	data := []byte{0x82, 0xa4, 't', 'o', 'o', 'l', 0xa3, 'a', '-', 'b', 0xa9}
	data = append(data, "arguments"...)
	n := strings.Count(string(args), "[")
	for range n {
		data = append(data, 0x91) // an array of one
	}
	return append(data, 0x01)
}

// Encoding refuses what decoding would refuse.
func TestEncodeRefusesValuesTooDeep(t *testing.T) {
	t.Parallel()
	if _, err := Msgpack.Marshal(&SubmitRequest{Tool: "a-b", Arguments: nested(MaxJSONDepth)}); err != nil {
		t.Fatalf("%d levels: %v", MaxJSONDepth, err)
	}
	if _, err := Msgpack.Marshal(&SubmitRequest{Tool: "a-b", Arguments: nested(MaxJSONDepth + 1)}); err == nil {
		t.Fatalf("%d levels encoded", MaxJSONDepth+1)
	}
}

func TestCheckJSONDepthSkipsStrings(t *testing.T) {
	t.Parallel()
	deepInString := JSON(`{"a":"` + strings.Repeat(`[{\"`, MaxJSONDepth+1) + `"}`)
	if err := CheckJSONDepth(deepInString); err != nil {
		t.Fatalf("brackets inside a string counted: %v", err)
	}
	if err := CheckJSONDepth(nested(MaxJSONDepth + 1)); err != errTooDeep {
		t.Fatalf("%d levels: %v", MaxJSONDepth+1, err)
	}
}
