package coordinator

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestToolsRemoveIsForOperators(t *testing.T) {
	g, _ := testGuard(t)
	req := &messages.ToolSwitchRequest{Namespace: "stale"}
	if _, err := g.admit(context.Background(), messages.EndpointToolsRemove, requestFrom("solo"), req); !isForbidden(err) {
		t.Errorf("tools.remove by an agent: err = %v, want forbidden", err)
	}
	if _, err := g.admit(context.Background(), messages.EndpointToolsRemove, requestFrom("ops"), &messages.ToolSwitchRequest{Namespace: "stale"}); err != nil {
		t.Errorf("tools.remove by an operator: %v", err)
	}
}
