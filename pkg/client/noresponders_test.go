package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// With no coordinator subscribed, a request is sent again up to 6 attempts,
// waiting 100 ms doubling to 1 s, each wait cut at random to between half
// and all of it, and then fails with no_responders: about 1.3 to 2.5 s in
// all (docs/reliability.md, "The SDK").
func TestNoRespondersIsRetriedForAboutTwoSeconds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{})
	start := time.Now()
	_, err := c.Get(b.ctx, "c1")
	elapsed := time.Since(start)
	if !errors.Is(err, messages.ErrNoResponders) {
		t.Fatalf("Get without a coordinator: %v, want %s", err, messages.CodeNoResponders)
	}
	// The waits alone are at least half of 100+200+400+800+1000 ms; the
	// upper bound leaves room for a loaded machine.
	if elapsed < 1250*time.Millisecond || elapsed > 6*time.Second {
		t.Fatalf("no_responders came after %v, want about 1.3 to 2.5 s", elapsed)
	}
}
