package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// exposureCatalog is the snapshot of enabled tools that exposure resolves
// against, rebuilt only when a tool definition or switch changes.
type exposureCatalog struct {
	mu      sync.Mutex
	version uint64
	cat     *exposure.Catalog
}

func (c *Coordinator) exposureCatalog() *exposure.Catalog {
	v := c.catalog.ToolsVersion()
	c.expo.mu.Lock()
	defer c.expo.mu.Unlock()
	if c.expo.cat != nil && c.expo.version == v {
		return c.expo.cat
	}
	tools := c.catalog.Tools()
	defs := make([]messages.ToolDefinition, 0, len(tools))
	for _, t := range tools {
		if off, _ := c.catalog.Disabled(t.Definition.ToolName()); !off {
			defs = append(defs, t.Definition)
		}
	}
	c.expo.cat = exposure.NewCatalog(v, defs)
	c.expo.version = v
	return c.expo.cat
}

// discoverable is the rule for tools outside an agent's bundles: whatever
// the agent may call and that can run now.
func (c *Coordinator) discoverable(agent string) func(*messages.ToolDefinition) bool {
	return func(def *messages.ToolDefinition) bool {
		return c.permitted(agent, def) && c.catalog.Available(def.Namespace)
	}
}

// permitted is true unless policy denies the tool to the agent whatever
// the arguments.
func (c *Coordinator) permitted(agent string, def *messages.ToolDefinition) bool {
	p := c.policy.Load()
	return p == nil || p.Visible(agent, *def)
}

func isModelView(lr *messages.ListToolsRequest) bool {
	return lr.Agent != "" || lr.Turn != "" || lr.Format != "" || lr.Intake != nil || lr.Clarification || len(lr.Chosen) > 0
}

// modelView answers tools.list for one model iteration. It retries when
// another request changed the turn at the same moment.
func (c *Coordinator) modelView(ctx context.Context, lr *messages.ListToolsRequest) (*messages.ListToolsReply, error) {
	for attempt := 0; ; attempt++ {
		reply, err := c.resolveIteration(ctx, lr)
		if errors.Is(err, errTurnChanged) && attempt < 10 {
			continue
		}
		return reply, err
	}
}

func (c *Coordinator) resolveIteration(ctx context.Context, lr *messages.ListToolsRequest) (*messages.ListToolsReply, error) {
	if lr.Agent != "" {
		if err := messages.ValidateID("agent", lr.Agent); err != nil {
			return nil, err
		}
	}
	if lr.Format != "" && !slices.Contains(toolschema.Formats(), lr.Format) {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown format %q; known formats: %v", lr.Format, toolschema.Formats())
	}
	var turn *turnRecord
	if lr.Turn != "" {
		var err error
		if turn, err = c.loadTurn(ctx, lr.Turn); err != nil {
			return nil, err
		}
		if err := turn.claim(lr.Agent); err != nil {
			return nil, err
		}
	}
	agent := lr.Agent
	it := exposure.Iteration{Clarification: lr.Clarification, Chosen: lr.Chosen, Discoverable: c.discoverable(agent)}
	intake := lr.Intake
	if turn != nil {
		agent = turn.state.Agent
		it.Discoverable = c.discoverable(agent)
		it.Discovered, it.Activated = turn.state.Discovered, turn.state.Activated
		if intake == nil {
			intake = turn.state.Intake
		}
	}
	if intake != nil {
		it.Intake = &exposure.Intake{Tools: intake.Tools, Bundles: intake.Bundles}
	}
	vis := c.resolver.Resolve(agent, c.exposureCatalog(), it)

	reply := &messages.ListToolsReply{Tools: []messages.ToolEntry{}}
	var defs []messages.ToolDefinition
	var revisions []uint64
	for _, t := range vis.Tools {
		def := t.Definition
		if lr.Namespace != "" && def.Namespace != lr.Namespace {
			continue
		}
		// Tools that nothing can run now, or that policy denies, are not shown to a model.
		if !c.catalog.Available(def.Namespace) || !c.permitted(agent, def) {
			continue
		}
		entry := messages.ToolEntry{ToolDefinition: *def, Available: true, Exposure: &messages.ToolExposure{
			Tier:          string(t.Tier),
			AlwaysInclude: t.AlwaysInclude,
			Bundles:       t.Bundles,
		}}
		if !t.Admitted {
			entry.Exposure.Tier = ""
		}
		if t.Approval != nil {
			entry.Exposure.Approval = string(t.Approval.Mode)
		}
		if t.Async != nil {
			entry.Exposure.Async = t.Async.Enabled
		}
		reply.Tools = append(reply.Tools, entry)
		defs = append(defs, *def)
		var rev uint64
		if ct, ok := c.catalog.Lookup(def.Name); ok {
			rev = ct.Revision
		}
		revisions = append(revisions, rev)
	}
	if lr.Format != "" {
		schemas, err := c.formats.format(defs, revisions, lr.Format, toolschema.Options{Think: lr.Think, Strict: lr.Strict})
		if err != nil {
			return nil, err
		}
		reply.Schemas = schemas
	}
	if turn != nil {
		reply.Dropped = vis.Dropped
		changed := turn.prune(vis.Dropped)
		if lr.Intake != nil {
			turn.state.Intake = lr.Intake
			changed = true
		}
		if changed || turn.revision == 0 {
			if err := c.saveTurn(ctx, turn); err != nil {
				return nil, err
			}
		}
	}
	return reply, nil
}

func (c *Coordinator) activate(ctx context.Context, req *request) (any, error) {
	var ar messages.ActivateRequest
	if err := req.decode(&ar); err != nil {
		return nil, err
	}
	if len(ar.Tools) == 0 {
		return nil, messages.Errorf(messages.CodeBadRequest, "tools is required")
	}
	return c.Activate(ctx, &ar)
}

// Activate makes tools visible for the rest of a turn (tools.activate).
// Each tool must exist, be enabled, and be one the agent may call.
func (c *Coordinator) Activate(ctx context.Context, ar *messages.ActivateRequest) (*messages.ActivateReply, error) {
	cat := c.exposureCatalog()
	for attempt := 0; ; attempt++ {
		turn, err := c.loadTurn(ctx, ar.Turn)
		if err != nil {
			return nil, err
		}
		if err := turn.claim(ar.Agent); err != nil {
			return nil, err
		}
		admission := c.resolver.Admission(turn.state.Agent, cat)
		for _, name := range ar.Tools {
			tn, err := messages.ParseToolName(name)
			if err != nil {
				return nil, err
			}
			def, ok := cat.Lookup(tn.String())
			if !ok {
				return nil, messages.Errorf(messages.CodeToolNotFound, "no enabled tool %s in the catalog", tn)
			}
			if admission.Excluded(tn.String()) {
				return nil, messages.Errorf(messages.CodeNotAdmitted, "the exposure rules of agent %q exclude %s", turn.state.Agent, tn)
			}
			if !c.permitted(turn.state.Agent, def) {
				return nil, messages.Errorf(messages.CodeDenied, "policy denies %s to agent %q", tn, turn.state.Agent)
			}
			if !slices.Contains(turn.state.Activated, tn.String()) {
				turn.state.Activated = append(turn.state.Activated, tn.String())
			}
		}
		err = c.saveTurn(ctx, turn)
		if errors.Is(err, errTurnChanged) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &messages.ActivateReply{Turn: ar.Turn, Activated: turn.state.Activated}, nil
	}
}

// turnRecord is a turn's saved state with the KV revision it was read at.
type turnRecord struct {
	state    messages.TurnState
	revision uint64
}

// claim binds the turn to an agent: a turn belongs to the first agent that
// names it, and another agent cannot use it.
func (t *turnRecord) claim(agent string) error {
	if agent == "" {
		return nil
	}
	if t.state.Agent == "" {
		t.state.Agent = agent
		return nil
	}
	if t.state.Agent != agent {
		return messages.Errorf(messages.CodeConflict, "turn %s belongs to agent %q, not %q", t.state.Turn, t.state.Agent, agent)
	}
	return nil
}

// prune removes vanished tools from the turn's saved selections.
func (t *turnRecord) prune(dropped []string) bool {
	if len(dropped) == 0 {
		return false
	}
	gone := func(name string) bool { return slices.Contains(dropped, name) }
	before := len(t.state.Discovered) + len(t.state.Activated)
	t.state.Discovered = slices.DeleteFunc(t.state.Discovered, gone)
	t.state.Activated = slices.DeleteFunc(t.state.Activated, gone)
	if t.state.Intake != nil {
		t.state.Intake.Tools = slices.DeleteFunc(t.state.Intake.Tools, gone)
	}
	return before != len(t.state.Discovered)+len(t.state.Activated)
}

var errTurnChanged = errors.New("turn changed concurrently")

func (c *Coordinator) loadTurn(ctx context.Context, turn string) (*turnRecord, error) {
	key, err := messages.TurnStateKey(turn)
	if err != nil {
		return nil, err
	}
	e, err := c.turns.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &turnRecord{state: messages.TurnState{Turn: turn}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read turn %s: %w", turn, err)
	}
	rec := &turnRecord{revision: e.Revision()}
	if err := json.Unmarshal(e.Value(), &rec.state); err != nil {
		return nil, fmt.Errorf("turn %s is unreadable: %w", turn, err)
	}
	return rec, nil
}

// saveTurn writes the turn if nobody else did since it was read.
func (c *Coordinator) saveTurn(ctx context.Context, t *turnRecord) error {
	key, err := messages.TurnStateKey(t.state.Turn)
	if err != nil {
		return err
	}
	t.state.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(&t.state)
	if err != nil {
		return err
	}
	if t.revision == 0 {
		_, err = c.turns.Create(ctx, key, data)
	} else {
		_, err = c.turns.Update(ctx, key, data, t.revision)
	}
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
		return errTurnChanged
	}
	if err != nil {
		return fmt.Errorf("save turn %s: %w", t.state.Turn, err)
	}
	return nil
}

// addDiscovered records a returned discovery page with the turn.
func (c *Coordinator) addDiscovered(ctx context.Context, turn, agent string, names []string) error {
	for attempt := 0; ; attempt++ {
		t, err := c.loadTurn(ctx, turn)
		if err != nil {
			return err
		}
		if err := t.claim(agent); err != nil {
			return err
		}
		for _, n := range names {
			if !slices.Contains(t.state.Discovered, n) {
				t.state.Discovered = append(t.state.Discovered, n)
			}
		}
		err = c.saveTurn(ctx, t)
		if errors.Is(err, errTurnChanged) && attempt < 10 {
			continue
		}
		return err
	}
}
