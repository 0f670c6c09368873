package coordinator

import (
	"context"

	"github.com/toolbus/toolbus/internal/wire/discovery"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Discover searches the tools the agent may use, as tools.discover does,
// without the request's identity checks: for the benchmarks of package
// coordinator_test, which cannot reach the coordinator's view.
func (c *Coordinator) Discover(ctx context.Context, dr *messages.DiscoverRequest) (*messages.DiscoverReply, error) {
	return c.view.discover(ctx, dr)
}

// DiscoveryStatus says which stored index version the coordinator's
// discovery index answers like.
func (c *Coordinator) DiscoveryStatus() discovery.Status { return c.view.index.Status() }

// ProcessCPU is the CPU time the process has used (processCPU), for the
// benchmarks of package coordinator_test.
var ProcessCPU = processCPU

// CopiesLeftToTheirFirst counts the submits the coordinator did not
// handle because they were copies of one it was handling (requestsInHand).
func (c *Coordinator) CopiesLeftToTheirFirst() int64 { return c.inHand.copies.Load() }
