package coordinator

import (
	"context"
	"time"

	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
)

// toolSwitches disables and enables tools and namespaces (tools.disable,
// tools.enable). Disabled tools stay in the catalog, listed as disabled;
// calls to them fail with tool_disabled and no model sees them.
type toolSwitches struct {
	catalog *catalog.View
	store   *catalog.Store
}

func (s *toolSwitches) enable(ctx context.Context, sr *messages.ToolSwitchRequest) (*struct{}, error) {
	return s.set(ctx, sr, false)
}

func (s *toolSwitches) disable(ctx context.Context, sr *messages.ToolSwitchRequest) (*struct{}, error) {
	return s.set(ctx, sr, true)
}

func (s *toolSwitches) set(ctx context.Context, sr *messages.ToolSwitchRequest, disable bool) (*struct{}, error) {
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
		if _, ok, err := s.catalog.Get(ctx, name); err != nil {
			return nil, unavailable(err, "read tool %s", name)
		} else if !ok {
			return nil, messages.Errorf(messages.CodeToolNotFound, "no tool %s in the catalog", name)
		}
		ns, method = name.Namespace, name.Method
	}
	state := messages.DisabledState{Reason: sr.Reason, By: sr.By, At: time.Now().UTC()}
	if err := s.store.SetDisabled(ctx, ns, method, disable, state); err != nil {
		return nil, unavailable(err, "switch %s", sr.Tool+sr.Namespace)
	}
	return &struct{}{}, nil
}
