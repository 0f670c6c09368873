package client

import (
	"context"
	"fmt"
	"iter"

	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
)

// CatalogChanges follows the catalog and yields each change made after it
// returned (it loads the catalog's current contents first) (docs/protocol.md, "Catalog changes"): tools added, changed and
// removed, tools and namespaces disabled and enabled, workers joining and
// leaving. It reads the catalog bucket, so the connection's user needs
// JetStream reads of it (a service or console user of an installation's
// TOOLBUS account; agents' users have none).
func (c *Client) CatalogChanges(ctx context.Context) (iter.Seq2[messages.CatalogChange, error], error) {
	kv, err := c.js.KeyValue(ctx, c.names.CatalogBucket())
	if err != nil {
		return nil, fmt.Errorf("catalog bucket %s: %w", c.names.CatalogBucket(), err)
	}
	return catalog.Follow(ctx, kv)
}
