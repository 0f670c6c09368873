package coordinator

import (
	"context"
	"time"

	"github.com/toolbus/toolbus/pkg/catalog"
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

func (c *Coordinator) enableTool(ctx context.Context, req *request) (any, error) {
	return c.switchTool(ctx, req, false)
}

func (c *Coordinator) disableTool(ctx context.Context, req *request) (any, error) {
	return c.switchTool(ctx, req, true)
}

// switchTool disables or enables a tool or a namespace (tools.disable,
// tools.enable). Disabled tools stay in the catalog, listed as disabled;
// calls to them fail with tool_disabled and no model sees them.
func (c *Coordinator) switchTool(ctx context.Context, req *request, disable bool) (any, error) {
	var sr messages.ToolSwitchRequest
	if err := req.decode(&sr); err != nil {
		return nil, err
	}
	if (sr.Tool == "") == (sr.Namespace == "") {
		return nil, messages.Errorf(messages.CodeBadRequest, "name either a tool or a namespace")
	}
	if disable && sr.Reason == "" {
		return nil, messages.Errorf(messages.CodeBadRequest, "reason is required to disable")
	}
	ns, method := sr.Namespace, ""
	if sr.Tool != "" {
		name, err := messages.ParseToolName(sr.Tool)
		if err != nil {
			return nil, err
		}
		if _, ok, err := c.catalog.Get(ctx, name); err != nil {
			return nil, err
		} else if !ok {
			return nil, messages.Errorf(messages.CodeToolNotFound, "no tool %s in the catalog", name)
		}
		ns, method = name.Namespace, name.Method
	}
	state := messages.DisabledState{Reason: sr.Reason, By: sr.By, At: time.Now().UTC()}
	if err := catalog.NewStore(c.catalogKV).SetDisabled(ctx, ns, method, disable, state); err != nil {
		return nil, err
	}
	return &struct{}{}, nil
}
