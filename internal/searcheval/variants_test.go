package searcheval

import (
	"github.com/toolbus/toolbus/pkg/messages"
)

func mapTools(fn func(d *messages.ToolDefinition)) func(c *Corpus) *Corpus {
	return func(c *Corpus) *Corpus {
		cc := *c
		cc.Tools = append([]messages.ToolDefinition(nil), c.Tools...)
		for i := range cc.Tools {
			fn(&cc.Tools[i])
		}
		return &cc
	}
}

func tuneVariants() []variant {
	return []variant{{name: "default"}, {name: "no title", tools: mapTools(func(d *messages.ToolDefinition) { d.Title = "" })}}
}
