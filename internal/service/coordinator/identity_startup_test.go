package coordinator_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
)

// syncBuffer is a log's destination that the coordinator's goroutines may share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCoordinatorSaysWhenIdentityIsNotAuthenticated: a coordinator
// started without identities (toolbus dev) warns at start-up that a
// request acts as the agent it names; one with identities does not.
func TestCoordinatorSaysWhenIdentityIsNotAuthenticated(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	const warning = "identity is not authenticated"
	for _, ids := range []*coordinator.Identities{nil, {Users: map[string]coordinator.UserIdentity{"agent_a": {Agents: []string{"support-bot"}}}}} {
		var log syncBuffer
		testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
			cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
			cfg.Identities = ids
		})
		warned := strings.Contains(log.String(), warning)
		if warned != (ids == nil) {
			t.Errorf("identities %v: warned %v at start-up:\n%s", ids != nil, warned, log.String())
		}
	}
}
