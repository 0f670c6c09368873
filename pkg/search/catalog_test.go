package search

import (
	"sync"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
	"github.com/toolbus/toolbus/pkg/messages"
)

var catalogCache sync.Map // size → []messages.ToolDefinition

func cachedCatalog(n int) []messages.ToolDefinition {
	if v, ok := catalogCache.Load(n); ok {
		return v.([]messages.ToolDefinition)
	}
	defs := synthetic.Catalog(n)
	catalogCache.Store(n, defs)
	return defs
}
