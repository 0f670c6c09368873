package mcp

import (
	"reflect"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/pkg/messages"
)

// TestContentAnnotationsAreKept checks that the audience and priority of
// MCP content reach the call's result, in both encodings of the contract.
func TestContentAnnotationsAreKept(t *testing.T) {
	priority := 0.9
	text := mcpgo.NewTextContent("for the user")
	text.Annotations = &mcpgo.Annotations{Audience: []mcpgo.Role{mcpgo.RoleUser}, Priority: &priority}
	link := mcpgo.NewResourceLink("file:///a.txt", "a.txt", "A file.", "text/plain")
	link.Annotations = &mcpgo.Annotations{Audience: []mcpgo.Role{mcpgo.RoleAssistant}, LastModified: "2026-11-30T10:00:00Z"}
	res, err := toResult(&mcpgo.CallToolResult{Content: []mcpgo.Content{text, &link, mcpgo.NewTextContent("plain")}})
	if err != nil {
		t.Fatal(err)
	}
	want := []*messages.ContentAnnotations{
		{Audience: []string{"user"}, Priority: &priority},
		{Audience: []string{"assistant"}, LastModified: "2026-11-30T10:00:00Z"},
		nil,
	}
	for i, w := range want {
		if got := res.Content[i].Annotations; !reflect.DeepEqual(got, w) {
			t.Errorf("block %d annotations %+v, want %+v", i, got, w)
		}
	}
	for _, codec := range []messages.Codec{messages.Msgpack, messages.JSONCodec} {
		data, err := codec.Marshal(&messages.CallResult{CallID: "c", Content: res.Content})
		if err != nil {
			t.Fatal(err)
		}
		var back messages.CallResult
		if err := codec.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			if got := back.Content[i].Annotations; !reflect.DeepEqual(got, w) {
				t.Errorf("%v: block %d annotations %+v, want %+v", codec, i, got, w)
			}
		}
	}
}

// TestDeliveryFromAnnotations checks the delivery guarantee an MCP tool's
// hints give it: only hints the server set count, a read-only tool is at
// least once, and idempotentHint decides over destructiveHint.
func TestDeliveryFromAnnotations(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name string
		a    mcpgo.ToolAnnotation
		want messages.Delivery
	}{
		{"no hints", mcpgo.ToolAnnotation{}, messages.DeliveryAtLeastOnce},
		{"destructive", mcpgo.ToolAnnotation{DestructiveHint: &yes}, messages.DeliveryAtMostOnce},
		{"not destructive", mcpgo.ToolAnnotation{DestructiveHint: &no}, messages.DeliveryAtLeastOnce},
		{"not idempotent", mcpgo.ToolAnnotation{IdempotentHint: &no}, messages.DeliveryAtMostOnce},
		{"idempotent", mcpgo.ToolAnnotation{IdempotentHint: &yes}, messages.DeliveryAtLeastOnce},
		{"destructive and idempotent", mcpgo.ToolAnnotation{DestructiveHint: &yes, IdempotentHint: &yes}, messages.DeliveryAtLeastOnce},
		{"not destructive, not idempotent", mcpgo.ToolAnnotation{DestructiveHint: &no, IdempotentHint: &no}, messages.DeliveryAtMostOnce},
		{"read-only and destructive", mcpgo.ToolAnnotation{ReadOnlyHint: &yes, DestructiveHint: &yes}, messages.DeliveryAtLeastOnce},
		{"read-only, not idempotent", mcpgo.ToolAnnotation{ReadOnlyHint: &yes, IdempotentHint: &no}, messages.DeliveryAtLeastOnce},
		{"not read-only, destructive", mcpgo.ToolAnnotation{ReadOnlyHint: &no, DestructiveHint: &yes}, messages.DeliveryAtMostOnce},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Source{cfg: Config{Name: "srv", Namespace: "ns"}}
			def, err := s.definition(mcpgo.Tool{Name: "rm", Annotations: tc.a}, "rm")
			if err != nil {
				t.Fatal(err)
			}
			if def.Delivery != tc.want {
				t.Errorf("delivery %q, want %q", def.Delivery, tc.want)
			}
		})
	}
}
