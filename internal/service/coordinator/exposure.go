package coordinator

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/search"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// toolView decides what each agent sees of the catalog: the tools listed
// for a model iteration, discovery, and the tools activated in a turn.
type toolView struct {
	catalog  *catalog.View
	resolver *exposure.Resolver
	policy   *atomic.Pointer[policy.Policy]
	turns    *turns
	index    *discovery.Index
	formats  formatCache
	expo     exposureCatalog
	// usage records each search of a turn, evidence for the calls that
	// follow; nil records none.
	usage *usage.Recorder
}

// exposureCatalog is the snapshot of enabled tools that exposure resolves
// against, rebuilt only when a tool definition or switch changes.
type exposureCatalog struct {
	mu      sync.Mutex
	version uint64
	cat     *exposure.Catalog
}

func (v *toolView) exposureCatalog() *exposure.Catalog {
	version := v.catalog.ToolsVersion()
	v.expo.mu.Lock()
	defer v.expo.mu.Unlock()
	if v.expo.cat != nil && v.expo.version == version {
		return v.expo.cat
	}
	tools := v.catalog.Tools()
	defs := make([]messages.ToolDefinition, 0, len(tools))
	for _, t := range tools {
		if off, _ := v.catalog.Disabled(t.Definition.ToolName()); !off {
			defs = append(defs, t.Definition)
		}
	}
	v.expo.cat = exposure.NewCatalog(version, defs)
	v.expo.version = version
	return v.expo.cat
}

// admission is what the agent's exposure rules admit of the catalog.
func (v *toolView) admission(agent string) *exposure.Admission {
	return v.resolver.Admission(agent, v.exposureCatalog())
}

// discoverable is the rule for tools outside an agent's bundles: whatever
// the agent may call and that can run now.
func (v *toolView) discoverable(agent string) func(*messages.ToolDefinition) bool {
	return func(def *messages.ToolDefinition) bool {
		if !v.permitted(agent, def) {
			return false
		}
		ok, _ := v.catalog.Serving(def)
		return ok
	}
}

// permitted is true unless policy denies the tool to the agent whatever
// the arguments.
func (v *toolView) permitted(agent string, def *messages.ToolDefinition) bool {
	p := v.policy.Load()
	return p == nil || p.Visible(agent, *def)
}

// list answers tools.list: the whole catalog, or with any of the model's
// options, the view of one model iteration.
func (v *toolView) list(ctx context.Context, lr *messages.ListToolsRequest) (*messages.ListToolsReply, error) {
	// Checked here too, for callers in the process that skip the API.
	if err := lr.Validate(); err != nil {
		return nil, err
	}
	if isModelView(lr) {
		return v.modelView(ctx, lr)
	}
	// The whole catalog is read after every write the bucket had: a
	// worker whose Start returned in another process is listed. A view
	// the watch cannot bring up to date in catalogSyncWait is listed as
	// it is.
	sctx, cancel := context.WithTimeout(ctx, catalogSyncWait)
	_ = v.catalog.Sync(sctx)
	cancel()
	reply := &messages.ListToolsReply{Tools: []messages.ToolEntry{}}
	for _, t := range v.catalog.Tools() {
		if lr.Namespace != "" && t.Definition.Namespace != lr.Namespace {
			continue
		}
		reply.Tools = append(reply.Tools, v.catalog.Entry(t))
	}
	return reply, nil
}

// catalogSyncWait bounds how long tools.list waits for the catalog's
// watch to pass the bucket's last write (catalog.View.Sync).
const catalogSyncWait = 2 * time.Second

func isModelView(lr *messages.ListToolsRequest) bool {
	return lr.Agent != "" || lr.Turn != "" || lr.Format != "" || lr.Intake != nil || lr.Clarification || len(lr.Chosen) > 0
}

// modelView answers tools.list for one model iteration. It retries when
// another request changed the turn at the same moment.
func (v *toolView) modelView(ctx context.Context, lr *messages.ListToolsRequest) (*messages.ListToolsReply, error) {
	for range turnAttempts {
		reply, err := v.resolveIteration(ctx, lr)
		if errors.Is(err, errTurnChanged) {
			continue
		}
		return reply, err
	}
	return nil, turnKeptChanging(lr.Turn)
}

func (v *toolView) resolveIteration(ctx context.Context, lr *messages.ListToolsRequest) (*messages.ListToolsReply, error) {
	if lr.Agent != "" {
		if err := messages.ValidateID("agent", lr.Agent); err != nil {
			return nil, err
		}
	}
	if lr.Format != "" && !slices.Contains(toolschema.Formats(), lr.Format) {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown format %q; known formats: %v", lr.Format, toolschema.Formats())
	}
	var turn *turnRecord
	// claimed is true when this request names the turn first as an agent
	// (the turn may have been saved before without one, by a call).
	claimed := false
	if lr.Turn != "" {
		var err error
		if turn, err = v.turns.load(ctx, lr.Turn); err != nil {
			return nil, err
		}
		claimed = turn.state.Agent == "" && lr.Agent != ""
		if err := turn.claim(lr.Agent); err != nil {
			return nil, err
		}
	}
	agent := lr.Agent
	it := exposure.Iteration{Clarification: lr.Clarification, Chosen: lr.Chosen, Discoverable: v.discoverable(agent)}
	intake := lr.Intake
	if turn != nil {
		agent = turn.state.Agent
		it.Discoverable = v.discoverable(agent)
		it.Discovered, it.Activated = turn.state.Discovered, turn.state.Activated
		if intake == nil {
			intake = turn.state.Intake
		}
	}
	if intake != nil {
		it.Intake = &exposure.Intake{Tools: intake.Tools, Bundles: intake.Bundles}
	}
	vis := v.resolver.Resolve(agent, v.exposureCatalog(), it)

	reply := &messages.ListToolsReply{Tools: []messages.ToolEntry{}}
	var defs []messages.ToolDefinition
	var revisions []uint64
	var denied []string
	for _, t := range vis.Tools {
		def := t.Definition
		if lr.Namespace != "" && def.Namespace != lr.Namespace {
			continue
		}
		// Tools that nothing can run now, or that policy denies, are not shown to a model.
		if ok, _ := v.catalog.Serving(def); !ok {
			continue
		}
		if !v.permitted(agent, def) {
			// A selection the policy now denies the agent is gone from
			// the turn, as an exclusion is.
			if turn != nil && (turn.selects(def.Name) || slices.Contains(lr.Chosen, def.Name)) {
				denied = append(denied, def.Name)
			}
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
		if ct, ok := v.catalog.Lookup(def.Name); ok {
			rev = ct.Revision
		}
		revisions = append(revisions, rev)
	}
	if lr.Format != "" {
		schemas, err := v.formats.format(defs, revisions, lr.Format, toolschema.Options{Think: lr.Think, Strict: lr.Strict})
		if err != nil {
			return nil, err
		}
		reply.Schemas = schemas
	}
	if turn != nil {
		reply.Dropped = append(v.gone(agent, vis.Dropped, &turn.state), denied...)
		changed := false
		if lr.Intake != nil {
			// Saved before the prune, so that what this intake names and
			// is gone is dropped from it too, not saved to be dropped again.
			turn.state.Intake = lr.Intake
			changed = true
		}
		if turn.prune(reply.Dropped) {
			changed = true
		}
		if changed || claimed || turn.revision == 0 {
			if err := v.turns.save(ctx, turn); err != nil {
				return nil, err
			}
		}
		// An agent's loop lists its tools for the turn before the model
		// answers: its calls that follow, one by one or as a batch, then
		// find the turn's owner without a read or a write.
		if turn.state.Agent != "" {
			v.turns.remember(turn.state.Turn, turn.state.Agent)
		}
	}
	return reply, nil
}

// gone returns the names among those an iteration could not show that
// are gone for good: tools removed from the catalog (or names that never
// named one), tools the agent's exposure rules no longer admit, and tools
// that policy now denies the agent, and, if only the turn's intake names
// it, an enabled tool that the rules do not admit. A tool that is only
// unavailable for now — disabled, or of a namespace without a live worker
// — is hidden but not gone, so the turn keeps its selection and shows it
// again once the tool is back.
func (v *toolView) gone(agent string, dropped []string, state *messages.TurnState) []string {
	if len(dropped) == 0 {
		return nil
	}
	var admission *exposure.Admission
	var out []string
	for _, name := range dropped {
		tn, err := messages.ParseToolName(name)
		if err != nil {
			out = append(out, name)
			continue
		}
		t, ok := v.catalog.Lookup(tn.String())
		if !ok || !v.permitted(agent, &t.Definition) {
			out = append(out, name)
			continue
		}
		if admission == nil {
			admission = v.admission(agent)
		}
		if admission.Excluded(tn.String()) {
			out = append(out, name)
			continue
		}
		selected := slices.Contains(state.Discovered, name) || slices.Contains(state.Activated, name)
		if _, enabled := admission.Catalog().Lookup(tn.String()); !selected && enabled {
			if _, admitted := admission.Lookup(tn.String()); !admitted {
				out = append(out, name)
			}
		}
	}
	return out
}

// activate makes tools visible for the rest of a turn (tools.activate).
// Each tool must exist, be enabled, and be one the agent may call.
func (v *toolView) activate(ctx context.Context, ar *messages.ActivateRequest) (*messages.ActivateReply, error) {
	if len(ar.Tools) == 0 {
		return nil, messages.Errorf(messages.CodeBadRequest, "tools is required")
	}
	cat := v.exposureCatalog()
	turn, err := v.turns.update(ctx, ar.Turn, ar.Agent, func(turn *turnRecord) error {
		admission := v.resolver.Admission(turn.state.Agent, cat)
		for _, name := range ar.Tools {
			tn, err := messages.ParseToolName(name)
			if err != nil {
				return err
			}
			def, ok := cat.Lookup(tn.String())
			if !ok {
				_, exists := v.catalog.Lookup(tn.String())
				if off, reason := v.catalog.Disabled(tn); exists && off {
					return messages.Errorf(messages.CodeToolDisabled, "tool %s is disabled: %s", tn, reason)
				}
				return messages.Errorf(messages.CodeToolNotFound, "no tool %s in the catalog", tn)
			}
			if admission.Excluded(tn.String()) {
				return messages.Errorf(messages.CodeNotAdmitted, "the exposure rules of agent %q exclude %s", turn.state.Agent, tn)
			}
			if d, hidden := v.policy.Load().Hidden(turn.state.Agent, *def); hidden {
				return messages.Errorf(messages.CodeDenied, "policy denies %s to agent %q: %s", tn, turn.state.Agent, d.Reason)
			}
			if !slices.Contains(turn.state.Activated, tn.String()) {
				turn.state.Activated = append(turn.state.Activated, tn.String())
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &messages.ActivateReply{Turn: ar.Turn, Activated: turn.state.Activated}, nil
}

// discover searches the tools the agent may use (tools.discover): enabled
// tools of live namespaces that its exposure rules do not exclude and that
// policy does not deny it. With a turn, the page's tools are saved with the
// turn and become visible on its next iterations.
func (v *toolView) discover(ctx context.Context, dr *messages.DiscoverRequest) (*messages.DiscoverReply, error) {
	// Checked here too: the built-in discovery tool calls this directly.
	if err := dr.Validate(); err != nil {
		return nil, err
	}
	if dr.Format != "" && !slices.Contains(toolschema.Formats(), dr.Format) {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown format %q; known formats: %v", dr.Format, toolschema.Formats())
	}
	if dr.Page < 0 || dr.PageSize < 0 || dr.PageSize > search.MaxPageSize {
		return nil, messages.Errorf(messages.CodeBadRequest, "page must be 0 or more and page_size between 1 and %d", search.MaxPageSize)
	}
	agent := dr.Agent
	// claimed is true when this request names the turn first as an agent:
	// the turn is then saved as the agent's even if the page holds nothing
	// to select.
	claimed := false
	var turn *turnRecord
	if dr.Turn != "" {
		var err error
		if turn, err = v.turns.load(ctx, dr.Turn); err != nil {
			return nil, err
		}
		claimed = turn.state.Agent == "" && dr.Agent != ""
		// Claimed on a copy: the record read is what the page is saved
		// onto, and claiming it is part of that save.
		probe := *turn
		if err := probe.claim(dr.Agent); err != nil {
			return nil, err
		}
		agent = probe.state.Agent
	}
	admission := v.admission(agent)
	allow := func(key string, t *catalog.Tool) bool {
		return t != nil && !admission.Excluded(key) && v.permitted(agent, &t.Definition)
	}
	res, err := v.index.SearchTools(search.Query{Text: dr.Query, Namespaces: dr.Namespaces, Tags: dr.Tags, Page: dr.Page, PageSize: dr.PageSize}, allow)
	if err != nil {
		return nil, messages.Errorf(messages.CodeBadRequest, "search: %v", err)
	}
	reply := &messages.DiscoverReply{Hits: make([]messages.DiscoverHit, 0, len(res.Hits)), Tools: make([]messages.ToolEntry, 0, len(res.Hits)), Page: dr.Page, More: res.More}
	var defs []messages.ToolDefinition
	var revisions []uint64
	page := make([]string, 0, len(res.Hits))
	for _, h := range res.Hits {
		name := h.Tool.String()
		t, ok := v.catalog.Lookup(name)
		if !ok {
			continue // removed since the index saw it
		}
		reply.Hits = append(reply.Hits, messages.DiscoverHit{Name: name, Score: h.Score, Exact: h.Exact})
		reply.Tools = append(reply.Tools, v.catalog.Entry(t))
		if dr.Format != "" {
			defs = append(defs, t.Definition)
			revisions = append(revisions, t.Revision)
		}
		page = append(page, name)
	}
	if dr.Format != "" && len(defs) > 0 {
		schemas, err := v.formats.format(defs, revisions, dr.Format, toolschema.Options{Think: dr.Think, Strict: dr.Strict})
		if err != nil {
			return nil, err
		}
		reply.Schemas = schemas
	}
	if dr.Turn != "" && (len(page) > 0 || claimed) {
		if err := v.turns.addDiscovered(ctx, turn, dr.Turn, agent, page); err != nil {
			return nil, err
		}
	}
	v.usage.Searched(dr.Turn, agent, dr.Query, page)
	return reply, nil
}
