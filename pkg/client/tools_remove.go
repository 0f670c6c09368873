package client

import (
	"context"

	"github.com/toolbus/toolbus/pkg/messages"
)

// RemoveTools removes a tool ("ns-method") or, when the name is a
// namespace, every tool of the namespace from the catalog (tools.remove,
// for operators). It is meant for stale tools that no worker serves.
func (c *Client) RemoveTools(ctx context.Context, toolOrNamespace, reason string) (*messages.RemoveToolsReply, error) {
	req := messages.ToolSwitchRequest{Reason: reason, By: c.opts.Agent}
	if messages.ValidateNamespace(toolOrNamespace) == nil {
		req.Namespace = toolOrNamespace
	} else {
		req.Tool = toolOrNamespace
	}
	var out messages.RemoveToolsReply
	return &out, c.request(ctx, messages.EndpointToolsRemove, &req, &out, repeatable, 0)
}
