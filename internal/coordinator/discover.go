package coordinator

import (
	"context"
	"slices"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
	"github.com/toolbus/toolbus/pkg/toolschema"
	"github.com/toolbus/toolbus/pkg/worker"
)

func (c *Coordinator) discover(ctx context.Context, req *request) (any, error) {
	var dr messages.DiscoverRequest
	if err := req.decode(&dr); err != nil {
		return nil, err
	}
	return c.Discover(ctx, &dr)
}

// Discover searches the tools the agent may use (tools.discover): enabled
// tools of live namespaces that its exposure rules do not exclude and that
// policy does not deny it. With a turn, the page's tools are saved with the
// turn and become visible on its next iterations.
func (c *Coordinator) Discover(ctx context.Context, dr *messages.DiscoverRequest) (*messages.DiscoverReply, error) {
	if dr.Agent != "" {
		if err := messages.ValidateID("agent", dr.Agent); err != nil {
			return nil, err
		}
	}
	if dr.Format != "" && !slices.Contains(toolschema.Formats(), dr.Format) {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown format %q; known formats: %v", dr.Format, toolschema.Formats())
	}
	if dr.Page < 0 || dr.PageSize < 0 || dr.PageSize > search.MaxPageSize {
		return nil, messages.Errorf(messages.CodeBadRequest, "page must be 0 or more and page_size between 1 and %d", search.MaxPageSize)
	}
	agent := dr.Agent
	var turn *turnRecord
	if dr.Turn != "" {
		var err error
		if turn, err = c.loadTurn(ctx, dr.Turn); err != nil {
			return nil, err
		}
		if err := turn.claim(dr.Agent); err != nil {
			return nil, err
		}
		agent = turn.state.Agent
	}
	admission := c.resolver.Admission(agent, c.exposureCatalog())
	allow := func(name messages.ToolName) bool {
		t, ok := c.catalog.Lookup(name.String())
		return ok && !admission.Excluded(name.String()) && c.permitted(agent, &t.Definition)
	}
	res, err := c.index.Search(search.Query{Text: dr.Query, Namespaces: dr.Namespaces, Tags: dr.Tags, Allow: allow, Page: dr.Page, PageSize: dr.PageSize})
	if err != nil {
		return nil, messages.Errorf(messages.CodeBadRequest, "search: %v", err)
	}
	reply := &messages.DiscoverReply{Hits: []messages.DiscoverHit{}, Tools: []messages.ToolEntry{}, Page: dr.Page, More: res.More}
	var defs []messages.ToolDefinition
	var revisions []uint64
	var page []string
	for _, h := range res.Hits {
		t, ok := c.catalog.Lookup(h.Tool.String())
		if !ok {
			continue // removed since the index saw it
		}
		reply.Hits = append(reply.Hits, messages.DiscoverHit{Name: h.Tool.String(), Score: h.Score, Exact: h.Exact})
		reply.Tools = append(reply.Tools, c.catalog.Entry(t))
		defs = append(defs, t.Definition)
		revisions = append(revisions, t.Revision)
		page = append(page, h.Tool.String())
	}
	if dr.Format != "" && len(defs) > 0 {
		schemas, err := c.formats.format(defs, revisions, dr.Format, toolschema.Options{Think: dr.Think, Strict: dr.Strict})
		if err != nil {
			return nil, err
		}
		reply.Schemas = schemas
	}
	if dr.Turn != "" && len(page) > 0 {
		if err := c.addDiscovered(ctx, dr.Turn, agent, page); err != nil {
			return nil, err
		}
	}
	return reply, nil
}

// BuiltinNamespace serves the tools that Toolbus itself offers to models,
// through the normal call path: "llm/tools:list" in the exposure rules'
// spelling.
const BuiltinNamespace = "llm_tools"

// discoveryToolArgs are the arguments of llm_tools-list.
type discoveryToolArgs struct {
	Query    string `json:"query" jsonschema:"description=What the tool you need should do\\, in a few words"`
	Page     int    `json:"page,omitempty" jsonschema:"description=Page of results\\, from 0,minimum=0"`
	PageSize int    `json:"page_size,omitempty" jsonschema:"description=Results per page (default 10),minimum=1,maximum=50"`
}

type discoveredTool struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Score       float64 `json:"score"`
}

type discoveryToolResult struct {
	Tools []discoveredTool `json:"tools"`
	Page  int              `json:"page"`
	More  bool             `json:"more"`
	Note  string           `json:"note"`
}

// builtinTools are the tools of BuiltinNamespace.
func (c *Coordinator) builtinTools() []worker.Tool {
	list := worker.Func("list",
		"Searches the tool catalog for tools that can do what you need. The tools it returns become available to you on your next step; call them directly.",
		func(ctx context.Context, in discoveryToolArgs) (discoveryToolResult, error) {
			call := worker.CallFrom(ctx)
			reply, err := c.Discover(ctx, &messages.DiscoverRequest{Query: in.Query, Agent: call.Agent, Turn: call.Turn, Page: in.Page, PageSize: in.PageSize})
			if err != nil {
				return discoveryToolResult{}, err
			}
			out := discoveryToolResult{Tools: []discoveredTool{}, Page: reply.Page, More: reply.More}
			for i, h := range reply.Hits {
				out.Tools = append(out.Tools, discoveredTool{Name: h.Name, Description: reply.Tools[i].Description, Score: h.Score})
			}
			switch {
			case len(out.Tools) == 0:
				out.Note = "No tool matches; try other words."
			case call.Turn == "":
				out.Note = "These tools exist; without a turn they are not added to your tools."
			default:
				out.Note = "These tools are available from your next step."
			}
			return out, nil
		},
		worker.WithTags(messages.TagReadOnly), worker.ConcurrencySafe(), worker.WithSearchHint("find search discover tools catalog capabilities"))
	list.Definition.Source = messages.ToolSource{Kind: messages.SourceBuiltin}
	return []worker.Tool{list}
}
