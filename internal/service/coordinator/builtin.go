package coordinator

import (
	"context"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// BuiltinNamespace serves the tools that Toolbus itself offers to models,
// through the normal call path: "llm/tools:list" in the exposure rules'
// spelling.
const BuiltinNamespace = "llm_tools"

// discoveryToolArgs are the arguments of llm_tools-list: those of
// tools.discover that a model may choose (docs/protocol.md lists them).
type discoveryToolArgs struct {
	Query      string   `json:"query" jsonschema:"description=What the tool you need should do\\, in a few words"`
	Namespaces []string `json:"namespaces,omitempty" jsonschema:"description=Only tools of these namespaces (the part of a tool name before the first dash)"`
	Tags       []string `json:"tags,omitempty" jsonschema:"description=Only tools with at least one of these tags\\, such as read_only"`
	Page       int      `json:"page,omitempty" jsonschema:"description=Page of results\\, from 0,minimum=0"`
	PageSize   int      `json:"page_size,omitempty" jsonschema:"description=Results per page (default 10),minimum=1,maximum=50"`
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

// builtinTools are the tools of BuiltinNamespace; discover searches the catalog.
func builtinTools(discover func(context.Context, *messages.DiscoverRequest) (*messages.DiscoverReply, error)) []worker.Tool {
	list := worker.Func("list",
		"Searches the tool catalog for tools that can do what you need. The tools it returns become available to you on your next step; call them directly.",
		func(ctx context.Context, in discoveryToolArgs) (discoveryToolResult, error) {
			call := worker.CallFrom(ctx)
			reply, err := discover(ctx, &messages.DiscoverRequest{Query: in.Query, Namespaces: in.Namespaces, Tags: in.Tags, Agent: call.Agent, Turn: call.Turn, Page: in.Page, PageSize: in.PageSize})
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
