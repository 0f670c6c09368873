package messages

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// validator is every request type with a Validate method.
type validator interface{ Validate() error }

// badNames are agent, turn and call IDs that must never reach a subject
// or a bucket key.
var badNames = []string{"a.b", "*", ">", "$JS", "a b", strings.Repeat("a", MaxIDLength+1)}

// checkValidation runs the cases: want is "" for a valid request, or the
// code it is refused with.
func checkValidation(t *testing.T, cases map[string]struct {
	req  validator
	want ErrorCode
}) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.req.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted; want %s", tc.want)
			case tc.want != "" && CodeOf(err) != tc.want:
				t.Fatalf("err = %v; want code %s", err, tc.want)
			}
		})
	}
}

type validationCases = map[string]struct {
	req  validator
	want ErrorCode
}

// withBadNames adds a case per bad name, built by build, refused as invalid_name.
func withBadNames(cases validationCases, field string, build func(string) validator) validationCases {
	for _, n := range badNames {
		cases[field+" "+n[:min(len(n), 8)]] = struct {
			req  validator
			want ErrorCode
		}{build(n), CodeInvalidName}
	}
	return cases
}

func TestSubmitRequestValidate(t *testing.T) {
	route := strings.Repeat("R", RouteLength)
	cases := validationCases{
		"minimal":               {&SubmitRequest{Tool: "fs-read"}, ""},
		"every option":          {&SubmitRequest{Tool: "fs:read", Agent: "a-1", Turn: "t_1", IdempotencyKey: "k", TimeoutMS: MaxTimeoutMS, Wait: true, WaitMS: MaxTimeoutMS, Notify: "_INBOX.x.y"}, ""},
		"no tool":               {&SubmitRequest{}, CodeBadRequest},
		"bad tool":              {&SubmitRequest{Tool: "fs"}, CodeInvalidName},
		"timeout_ms 2^63-1":     {&SubmitRequest{Tool: "fs-read", TimeoutMS: math.MaxInt64}, CodeBadRequest},
		"timeout_ms 10^13":      {&SubmitRequest{Tool: "fs-read", TimeoutMS: 1e13}, CodeBadRequest},
		"timeout_ms over range": {&SubmitRequest{Tool: "fs-read", TimeoutMS: MaxTimeoutMS + 1}, CodeBadRequest},
		"timeout_ms negative":   {&SubmitRequest{Tool: "fs-read", TimeoutMS: -1}, CodeBadRequest},
		"wait_ms 2^63-1":        {&SubmitRequest{Tool: "fs-read", Wait: true, WaitMS: math.MaxInt64}, CodeBadRequest},
		"wait_ms negative":      {&SubmitRequest{Tool: "fs-read", Wait: true, WaitMS: -1}, CodeBadRequest},
		"long idempotency key":  {&SubmitRequest{Tool: "fs-read", IdempotencyKey: strings.Repeat("k", MaxIdempotencyKeyLength+1)}, CodeBadRequest},
		"bad notify":            {&SubmitRequest{Tool: "fs-read", Notify: "toolbus.>"}, CodeInvalidName},
		"route with key":        {&SubmitRequest{Tool: "fs-read", Route: route, IdempotencyKey: "k"}, CodeBadRequest},
		"call_id without route": {&SubmitRequest{Tool: "fs-read", CallID: route + route}, CodeBadRequest},
		"quiet without call_id": {&SubmitRequest{Tool: "fs-read", Quiet: true}, CodeBadRequest},
		"routed quiet":          {&SubmitRequest{Tool: "fs-read", Route: route, CallID: route + route, Quiet: true}, ""},
	}
	withBadNames(cases, "agent", func(n string) validator { return &SubmitRequest{Tool: "fs-read", Agent: n} })
	withBadNames(cases, "turn", func(n string) validator { return &SubmitRequest{Tool: "fs-read", Turn: n} })
	checkValidation(t, cases)
}

func TestListToolsRequestValidate(t *testing.T) {
	cases := validationCases{
		"whole catalog":    {&ListToolsRequest{}, ""},
		"model view":       {&ListToolsRequest{Namespace: "fs", Agent: "a", Turn: "t", Chosen: []string{"fs.read"}, Intake: &IntakeSelection{Tools: []string{"fs:read"}, Bundles: []string{"files"}}}, ""},
		"bad namespace":    {&ListToolsRequest{Namespace: "a-b"}, CodeInvalidName},
		"bad chosen":       {&ListToolsRequest{Chosen: []string{"*"}}, CodeInvalidName},
		"bad intake tool":  {&ListToolsRequest{Intake: &IntakeSelection{Tools: []string{"fs-*"}}}, CodeInvalidName},
		"bad intake group": {&ListToolsRequest{Intake: &IntakeSelection{Bundles: []string{"a.b"}}}, CodeInvalidName},
	}
	withBadNames(cases, "agent", func(n string) validator { return &ListToolsRequest{Agent: n} })
	withBadNames(cases, "turn", func(n string) validator { return &ListToolsRequest{Turn: n} })
	checkValidation(t, cases)
}

func TestActivateRequestValidate(t *testing.T) {
	cases := validationCases{
		"valid":     {&ActivateRequest{Agent: "a", Turn: "t", Tools: []string{"fs-read"}}, ""},
		"no agent":  {&ActivateRequest{Turn: "t", Tools: []string{"fs-read"}}, ""},
		"no turn":   {&ActivateRequest{Tools: []string{"fs-read"}}, CodeBadRequest},
		"no tools":  {&ActivateRequest{Turn: "t"}, CodeBadRequest},
		"bad tool":  {&ActivateRequest{Turn: "t", Tools: []string{"fs-read", "x"}}, CodeInvalidName},
		"wild tool": {&ActivateRequest{Turn: "t", Tools: []string{"fs.>"}}, CodeInvalidName},
	}
	withBadNames(cases, "agent", func(n string) validator { return &ActivateRequest{Agent: n, Turn: "t", Tools: []string{"fs-read"}} })
	withBadNames(cases, "turn", func(n string) validator { return &ActivateRequest{Turn: n, Tools: []string{"fs-read"}} })
	checkValidation(t, cases)
}

func TestCallAndTurnRequestsValidate(t *testing.T) {
	cases := validationCases{
		"get":              {&GetCallRequest{CallID: "c1"}, ""},
		"get no id":        {&GetCallRequest{}, CodeBadRequest},
		"cancel":           {&CancelRequest{CallID: "c1", By: "Alice Smith <alice@example.com>", Reason: "no longer needed"}, ""},
		"cancel no id":     {&CancelRequest{}, CodeBadRequest},
		"cancel long by":   {&CancelRequest{CallID: "c1", By: strings.Repeat("b", MaxLabelLength+1)}, CodeInvalidName},
		"cancel by ctrl":   {&CancelRequest{CallID: "c1", By: "a\nb"}, CodeInvalidName},
		"cancel by binary": {&CancelRequest{CallID: "c1", By: "\xff"}, CodeInvalidName},
		"cancel reason":    {&CancelRequest{CallID: "c1", Reason: strings.Repeat("r", MaxReasonLength+1)}, CodeBadRequest},
		"turn":             {&GetTurnRequest{Turn: "t"}, ""},
		"turn none":        {&GetTurnRequest{}, CodeBadRequest},
	}
	withBadNames(cases, "get", func(n string) validator { return &GetCallRequest{CallID: n} })
	withBadNames(cases, "cancel", func(n string) validator { return &CancelRequest{CallID: n} })
	withBadNames(cases, "turn", func(n string) validator { return &GetTurnRequest{Turn: n} })
	checkValidation(t, cases)
}

func TestDiscoverRequestValidate(t *testing.T) {
	cases := validationCases{
		"query":              {&DiscoverRequest{Query: "read a file", Agent: "a", Turn: "t", Namespaces: []string{"fs"}, Tags: []string{"read only"}, Page: MaxDiscoverPage, PageSize: MaxDiscoverPageSize}, ""},
		"negative page":      {&DiscoverRequest{Page: -1}, CodeBadRequest},
		"page beyond range":  {&DiscoverRequest{Page: MaxDiscoverPage + 1}, CodeBadRequest},
		"page 2^63-1":        {&DiscoverRequest{Page: math.MaxInt64}, CodeBadRequest},
		"page_size negative": {&DiscoverRequest{PageSize: -1}, CodeBadRequest},
		"page_size too big":  {&DiscoverRequest{PageSize: MaxDiscoverPageSize + 1}, CodeBadRequest},
		"long query":         {&DiscoverRequest{Query: strings.Repeat("q", MaxQueryLength+1)}, CodeBadRequest},
		"bad namespace":      {&DiscoverRequest{Namespaces: []string{"a.b"}}, CodeInvalidName},
		"empty tag":          {&DiscoverRequest{Tags: []string{""}}, CodeInvalidName},
	}
	withBadNames(cases, "agent", func(n string) validator { return &DiscoverRequest{Agent: n} })
	withBadNames(cases, "turn", func(n string) validator { return &DiscoverRequest{Turn: n} })
	checkValidation(t, cases)
}

func TestApprovalRequestsValidate(t *testing.T) {
	cases := validationCases{
		"list":             {&ListApprovalsRequest{}, ""},
		"list all":         {&ListApprovalsRequest{State: "all", Agent: "a", Turn: "t"}, ""},
		"list bad state":   {&ListApprovalsRequest{State: "maybe"}, CodeBadRequest},
		"decide":           {&DecideRequest{ApprovalID: "c1", Decision: DecisionApprove, By: "the user", Remember: RememberTurn}, ""},
		"decide no id":     {&DecideRequest{Decision: DecisionDeny, By: "ops"}, CodeBadRequest},
		"decide no by":     {&DecideRequest{ApprovalID: "c1", Decision: DecisionDeny}, CodeBadRequest},
		"decide maybe":     {&DecideRequest{ApprovalID: "c1", Decision: "maybe", By: "ops"}, CodeBadRequest},
		"decide forever":   {&DecideRequest{ApprovalID: "c1", Decision: DecisionApprove, By: "ops", Remember: "forever"}, CodeBadRequest},
		"decide by ctrl":   {&DecideRequest{ApprovalID: "c1", Decision: DecisionApprove, By: "ops\x00"}, CodeInvalidName},
		"decide reason":    {&DecideRequest{ApprovalID: "c1", Decision: DecisionApprove, By: "ops", Reason: strings.Repeat("r", MaxReasonLength+1)}, CodeBadRequest},
		"switch tool":      {&ToolSwitchRequest{Tool: "fs-read", Reason: "broken", By: "ops"}, ""},
		"switch namespace": {&ToolSwitchRequest{Namespace: "fs"}, ""},
		"switch both":      {&ToolSwitchRequest{Tool: "fs-read", Namespace: "fs"}, CodeBadRequest},
		"switch neither":   {&ToolSwitchRequest{}, CodeBadRequest},
		"switch bad tool":  {&ToolSwitchRequest{Tool: "fs-*"}, CodeInvalidName},
		"switch bad ns":    {&ToolSwitchRequest{Namespace: ">"}, CodeInvalidName},
		"switch bad by":    {&ToolSwitchRequest{Namespace: "fs", By: strings.Repeat("b", MaxLabelLength+1)}, CodeInvalidName},
	}
	withBadNames(cases, "list agent", func(n string) validator { return &ListApprovalsRequest{Agent: n} })
	withBadNames(cases, "list turn", func(n string) validator { return &ListApprovalsRequest{Turn: n} })
	withBadNames(cases, "decide id", func(n string) validator {
		return &DecideRequest{ApprovalID: n, Decision: DecisionApprove, By: "ops"}
	})
	checkValidation(t, cases)
}

// Every refusal of a name matches ErrInvalidName, and of a range CodeBadRequest.
func TestValidateErrorsMatchByCode(t *testing.T) {
	if err := (&ActivateRequest{Agent: "$JS", Turn: "t", Tools: []string{"fs-read"}}).Validate(); !errors.Is(err, ErrInvalidName) {
		t.Errorf("bad agent: %v", err)
	}
	if err := (&SubmitRequest{Tool: "fs-read", TimeoutMS: math.MaxInt64}).Validate(); !errors.Is(err, &Error{Code: CodeBadRequest}) || !strings.Contains(err.Error(), "timeout_ms") {
		t.Errorf("timeout_ms: %v", err)
	}
}
