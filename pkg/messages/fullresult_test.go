package messages

import (
	"errors"
	"strings"
	"testing"
)

func FuzzDecodeFullResultRequest(f *testing.F) {
	fuzzDecoder[FullResultRequest](f, &FullResultRequest{CallID: "c", Cursor: "v1.Qm8ZkX2RAbkT0d9Hw3Lq1p.8312.523264"})
}

func FuzzDecodeFullResultReply(f *testing.F) {
	fuzzDecoder[FullResultReply](f, &FullResultReply{CallID: "c", Size: 9, Digest: "SHA-256=x", Offset: 4, Data: []byte("abcde"), NextCursor: "v1.n.1.9"})
}

// TestFullResultRequestsKeepTheirRanges: calls.full_result needs a call
// ID, and refuses a cursor longer than MaxCursorLength with bad_request.
func TestFullResultRequestsKeepTheirRanges(t *testing.T) {
	for name, tc := range map[string]struct {
		req  FullResultRequest
		want ErrorCode
	}{
		"first page":      {FullResultRequest{CallID: "c1"}, ""},
		"next page":       {FullResultRequest{CallID: "c1", Cursor: strings.Repeat("x", MaxCursorLength)}, ""},
		"no id":           {FullResultRequest{}, CodeBadRequest},
		"bad id":          {FullResultRequest{CallID: "a.b"}, CodeInvalidName},
		"cursor too long": {FullResultRequest{CallID: "c1", Cursor: strings.Repeat("x", MaxCursorLength+1)}, CodeBadRequest},
	} {
		err := tc.req.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(AsError(err), &Error{Code: tc.want}) {
			t.Errorf("%s: err = %v, want %s", name, err, tc.want)
		}
	}
}
