package coordinator

import (
	"context"

	"github.com/toolbus/toolbus/pkg/messages"
)

func (c *Coordinator) listTools(ctx context.Context, req *request) (any, error) {
	var lr messages.ListToolsRequest
	if err := req.decode(&lr); err != nil {
		return nil, err
	}
	if lr.Namespace != "" {
		if err := messages.ValidateNamespace(lr.Namespace); err != nil {
			return nil, err
		}
	}
	if isModelView(&lr) {
		return c.modelView(ctx, &lr)
	}
	reply := &messages.ListToolsReply{Tools: []messages.ToolEntry{}}
	for _, t := range c.catalog.Tools() {
		if lr.Namespace != "" && t.Definition.Namespace != lr.Namespace {
			continue
		}
		reply.Tools = append(reply.Tools, c.catalog.Entry(t))
	}
	return reply, nil
}
