package messages

import (
	"errors"
	"math"
	"testing"
)

func FuzzDecodeCallEventsRequest(f *testing.F) {
	fuzzDecoder[CallEventsRequest](f, &CallEventsRequest{CallID: "c", After: 7, WaitMS: 1000, Max: 10})
}

func FuzzDecodeCallEventsReply(f *testing.F) {
	fuzzDecoder[CallEventsReply](f, &CallEventsReply{CallID: "c", Last: 9, Finished: true, Events: []CallEvent{{CallID: "c", Kind: EventStarted}, {CallID: "c", Kind: EventLog, Log: &LogEntry{Level: "info", Message: "m"}}}})
}

// TestFollowRequestsKeepTheirRanges: calls.events and calls.get refuse
// wait_ms and max outside their documented ranges with bad_request.
func TestFollowRequestsKeepTheirRanges(t *testing.T) {
	for name, tc := range map[string]struct {
		req  interface{ Validate() error }
		want ErrorCode
	}{
		"events":                {&CallEventsRequest{CallID: "c1"}, ""},
		"events every option":   {&CallEventsRequest{CallID: "c1", After: math.MaxUint64, WaitMS: MaxTimeoutMS, Max: MaxCallEvents}, ""},
		"events no id":          {&CallEventsRequest{}, CodeBadRequest},
		"events bad id":         {&CallEventsRequest{CallID: "a.b"}, CodeInvalidName},
		"events wait_ms 2^63-1": {&CallEventsRequest{CallID: "c1", WaitMS: math.MaxInt64}, CodeBadRequest},
		"events wait_ms < 0":    {&CallEventsRequest{CallID: "c1", WaitMS: -1}, CodeBadRequest},
		"events max too large":  {&CallEventsRequest{CallID: "c1", Max: MaxCallEvents + 1}, CodeBadRequest},
		"events max < 0":        {&CallEventsRequest{CallID: "c1", Max: -1}, CodeBadRequest},
		"get wait_ms":           {&GetCallRequest{CallID: "c1", WaitMS: MaxTimeoutMS}, ""},
		"get wait_ms too large": {&GetCallRequest{CallID: "c1", WaitMS: MaxTimeoutMS + 1}, CodeBadRequest},
		"get wait_ms < 0":       {&GetCallRequest{CallID: "c1", WaitMS: -1}, CodeBadRequest},
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

func TestTooManyRequestsIs429(t *testing.T) {
	if got := CodeTooManyRequests.Status(); got != 429 {
		t.Errorf("status = %d", got)
	}
	if !errors.Is(Errorf(CodeTooManyRequests, "x"), ErrTooManyRequests) {
		t.Error("ErrTooManyRequests does not match its code")
	}
}
