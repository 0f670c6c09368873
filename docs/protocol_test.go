package docs

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// TestProtocolExamples decodes every example in protocol.md into the type
// it is marked with, refusing unknown fields, so the document cannot drift
// from pkg/messages.
func TestProtocolExamples(t *testing.T) {
	doc, err := os.ReadFile("protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]func() any{
		"ListToolsRequest":     func() any { return &messages.ListToolsRequest{} },
		"ListToolsReply":       func() any { return &messages.ListToolsReply{} },
		"SubmitRequest":        func() any { return &messages.SubmitRequest{} },
		"SubmitReply":          func() any { return &messages.SubmitReply{} },
		"CallRequest":          func() any { return &messages.CallRequest{} },
		"CallEvent":            func() any { return &messages.CallEvent{} },
		"CallResult":           func() any { return &messages.CallResult{} },
		"GetCallRequest":       func() any { return &messages.GetCallRequest{} },
		"CallInfo":             func() any { return &messages.CallInfo{} },
		"CancelRequest":        func() any { return &messages.CancelRequest{} },
		"CancelReply":          func() any { return &messages.CancelReply{} },
		"GetTurnRequest":       func() any { return &messages.GetTurnRequest{} },
		"TurnInfo":             func() any { return &messages.TurnInfo{} },
		"Error":                func() any { return &messages.Error{} },
		"ToolDefinition":       func() any { return &messages.ToolDefinition{} },
		"WorkerHeartbeat":      func() any { return &messages.WorkerHeartbeat{} },
		"TurnState":            func() any { return &messages.TurnState{} },
		"ActivateRequest":      func() any { return &messages.ActivateRequest{} },
		"ActivateReply":        func() any { return &messages.ActivateReply{} },
		"ToolSwitchRequest":    func() any { return &messages.ToolSwitchRequest{} },
		"Approval":             func() any { return &messages.Approval{} },
		"ListApprovalsRequest": func() any { return &messages.ListApprovalsRequest{} },
		"ListApprovalsReply":   func() any { return &messages.ListApprovalsReply{} },
		"DecideRequest":        func() any { return &messages.DecideRequest{} },
		"DecideReply":          func() any { return &messages.DecideReply{} },
		"AuditRecord":          func() any { return &messages.AuditRecord{} },
		"DiscoverRequest":      func() any { return &messages.DiscoverRequest{} },
		"DiscoverReply":        func() any { return &messages.DiscoverReply{} },
	}
	examples := regexp.MustCompile("(?s)<!-- message: (\\w+) -->\\s*```json\\n(.*?)```").FindAllSubmatch(doc, -1)
	seen := map[string]bool{}
	for _, m := range examples {
		name, body := string(m[1]), m[2]
		newValue, ok := types[name]
		if !ok {
			t.Errorf("example marked with unknown message %s", name)
			continue
		}
		seen[name] = true
		v := newValue()
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Errorf("%s example does not decode: %v\n%s", name, err, body)
			continue
		}
		// And it survives MessagePack.
		packed, err := messages.Msgpack.Marshal(v)
		if err != nil {
			t.Errorf("%s example does not encode as MessagePack: %v", name, err)
			continue
		}
		again := newValue()
		if err := messages.Msgpack.Unmarshal(packed, again); err != nil {
			t.Errorf("%s example does not decode from MessagePack: %v", name, err)
		}
	}
	for name := range types {
		if !seen[name] {
			t.Errorf("protocol.md has no example of %s", name)
		}
	}
}
