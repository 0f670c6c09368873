package messages

import (
	"strings"
	"testing"
)

func TestSubmitBatchRequestValidate(t *testing.T) {
	valid := func() SubmitBatchRequest {
		return SubmitBatchRequest{Format: "anthropic", ToolCalls: JSON(`[]`), Agent: "bot", Turn: "t-1", ResponseID: "msg_01", TimeoutMS: 1000, Notify: "_INBOX.a.b"}
	}
	if r := valid(); r.Validate() != nil {
		t.Fatalf("valid request refused: %v", r.Validate())
	}
	longest := valid()
	longest.WaitMS, longest.ResultsFormat = MaxTimeoutMS, "openai-chat"
	if err := longest.Validate(); err != nil {
		t.Errorf("wait_ms %d with a results_format: %v", MaxTimeoutMS, err)
	}
	for name, tc := range map[string]struct {
		mutate func(*SubmitBatchRequest)
		code   ErrorCode
	}{
		"no format":                      {func(r *SubmitBatchRequest) { r.Format = "" }, CodeBadRequest},
		"no tool calls":                  {func(r *SubmitBatchRequest) { r.ToolCalls = nil }, CodeBadRequest},
		"no turn":                        {func(r *SubmitBatchRequest) { r.Turn = "" }, CodeBadRequest},
		"turn with a dot":                {func(r *SubmitBatchRequest) { r.Turn = "a.b" }, CodeInvalidName},
		"agent with a star":              {func(r *SubmitBatchRequest) { r.Agent = "*" }, CodeInvalidName},
		"long response ID":               {func(r *SubmitBatchRequest) { r.ResponseID = strings.Repeat("r", MaxResponseIDLength+1) }, CodeBadRequest},
		"negative timeout":               {func(r *SubmitBatchRequest) { r.TimeoutMS = -1 }, CodeBadRequest},
		"overflowing timeout":            {func(r *SubmitBatchRequest) { r.TimeoutMS = MaxTimeoutMS + 1 }, CodeBadRequest},
		"notify not an inbox":            {func(r *SubmitBatchRequest) { r.Notify = "toolbus.x" }, CodeInvalidName},
		"negative wait":                  {func(r *SubmitBatchRequest) { r.WaitMS = -1 }, CodeBadRequest},
		"overflowing wait":               {func(r *SubmitBatchRequest) { r.WaitMS = MaxTimeoutMS + 1 }, CodeBadRequest},
		"results_format without wait_ms": {func(r *SubmitBatchRequest) { r.ResultsFormat = "gemini" }, CodeBadRequest},
		"response ID not UTF-8":          {func(r *SubmitBatchRequest) { r.ResponseID = "\xff" }, CodeBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			r := valid()
			tc.mutate(&r)
			if got := CodeOf(r.Validate()); got != tc.code {
				t.Fatalf("code %s, want %s (%v)", got, tc.code, r.Validate())
			}
		})
	}
}

func TestResultsRequestValidate(t *testing.T) {
	valid := func() ResultsRequest {
		return ResultsRequest{Format: "gemini", WaitMS: 5000, Calls: []BatchCall{
			{ToolCallID: "call_1", Name: "demo-echo", CallID: "iabc"},
			{ToolCallID: "call_2", Name: "nope", Error: &Error{Code: CodeToolNotFound, Message: "no tool"}},
		}}
	}
	if r := valid(); r.Validate() != nil {
		t.Fatalf("valid request refused: %v", r.Validate())
	}
	for name, tc := range map[string]struct {
		mutate func(*ResultsRequest)
		code   ErrorCode
	}{
		"no format":            {func(r *ResultsRequest) { r.Format = "" }, CodeBadRequest},
		"no calls":             {func(r *ResultsRequest) { r.Calls = nil }, CodeBadRequest},
		"too many calls":       {func(r *ResultsRequest) { r.Calls = make([]BatchCall, MaxBatchCalls+1) }, CodeBadRequest},
		"neither ID nor error": {func(r *ResultsRequest) { r.Calls[0].CallID = "" }, CodeBadRequest},
		"call ID with a dot":   {func(r *ResultsRequest) { r.Calls[0].CallID = "a.b" }, CodeInvalidName},
		"long tool-call ID":    {func(r *ResultsRequest) { r.Calls[0].ToolCallID = strings.Repeat("x", MaxToolCallIDLength+1) }, CodeBadRequest},
		"long name":            {func(r *ResultsRequest) { r.Calls[0].Name = strings.Repeat("x", MaxToolCallNameLength+1) }, CodeBadRequest},
		"refusal's long ID":    {func(r *ResultsRequest) { r.Calls[1].ToolCallID = strings.Repeat("x", MaxToolCallIDLength+1) }, CodeBadRequest},
		"refusal not UTF-8":    {func(r *ResultsRequest) { r.Calls[1].ToolCallID = "\xff" }, CodeBadRequest},
		"negative wait":        {func(r *ResultsRequest) { r.WaitMS = -1 }, CodeBadRequest},
		"overflowing wait":     {func(r *ResultsRequest) { r.WaitMS = MaxTimeoutMS + 1 }, CodeBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			r := valid()
			tc.mutate(&r)
			if got := CodeOf(r.Validate()); got != tc.code {
				t.Fatalf("code %s, want %s (%v)", got, tc.code, r.Validate())
			}
		})
	}
}

func TestValidateToolCallID(t *testing.T) {
	for id, ok := range map[string]bool{
		"call_abc123":                            true,
		"toolu_01A09q90qw90lq917835lq9":          true,
		"":                                       false,
		"a\nb":                                   false,
		"\xff":                                   false,
		strings.Repeat("x", MaxToolCallIDLength): true,
		strings.Repeat("x", MaxToolCallIDLength+1): false,
	} {
		if err := ValidateToolCallID(id); (err == nil) != ok {
			t.Errorf("ValidateToolCallID(%q) = %v", id, err)
		}
	}
}

// The batch messages go through both codecs unchanged.
func TestBatchMessagesRoundTrip(t *testing.T) {
	reply := &ResultsReply{
		Messages: []JSON{JSON(`{"role":"tool","tool_call_id":"call_1","content":"4"}`)},
		Calls: []BatchCall{
			{ToolCallID: "call_1", Name: "demo-add", CallID: "i1", State: StateCompleted, Duplicate: true},
			{ToolCallID: "call_2", Name: "ops-wipe", CallID: "i2", State: StateAwaitingApproval, Approval: &Approval{ApprovalID: "i2", CallID: "i2", State: ApprovalPending}},
			{ToolCallID: "call_3", Name: "x", Error: &Error{Code: CodeDenied, Message: "no", Details: []string{"d"}}},
		},
		Complete: true,
	}
	for _, c := range []Codec{Msgpack, JSONCodec} {
		data, err := c.Marshal(reply)
		if err != nil {
			t.Fatal(err)
		}
		var back ResultsReply
		if err := c.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		again, _ := JSONCodec.Marshal(&back)
		want, _ := JSONCodec.Marshal(reply)
		if string(again) != string(want) {
			t.Fatalf("%s: %s\nwant %s", c, again, want)
		}
	}
}

func FuzzDecodeSubmitBatchRequest(f *testing.F) {
	fuzzDecoder[SubmitBatchRequest](f, &SubmitBatchRequest{Format: "openai-chat", Turn: "t", ToolCalls: JSON(`[{"id":"call_1","type":"function","function":{"name":"demo-echo","arguments":"{\"text\":\"hi\"}"}}]`)})
}

func FuzzDecodeResultsRequest(f *testing.F) {
	fuzzDecoder[ResultsRequest](f, &ResultsRequest{Format: "anthropic", WaitMS: 10, Calls: []BatchCall{{ToolCallID: "toolu_1", CallID: "c", Error: &Error{Code: CodeDenied, Details: []string{"x"}}}}})
}

func FuzzDecodeSubmitBatchReply(f *testing.F) {
	fuzzDecoder[SubmitBatchReply](f, &SubmitBatchReply{Calls: []BatchCall{{ToolCallID: "toolu_1", CallID: "c", State: StateQueued, Approval: &Approval{ApprovalID: "a"}}}})
}
