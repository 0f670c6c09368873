package client_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
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
	// The waits alone are at least half of 100+200+400+800+1000 ms. The
	// upper bound leaves a busy machine room, and is well short of the
	// 30 s of NoCoordinatorWait, which a request sent again until then
	// (not after six attempts) would take.
	if elapsed < 1250*time.Millisecond || elapsed > 20*time.Second {
		t.Fatalf("no_responders came after %v, want about 1.3 to 2.5 s", elapsed)
	}
}

// A request larger than the server's max_payload (docs/operations.md,
// "Limits and sizing") is refused before it is sent, with
// payload_too_large naming the server's limit, not as an internal error;
// arguments over the coordinator's own bound get the same code from it.
func TestRequestOverMaxPayloadIsPayloadTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	nc := testenv.Connect(t, b.srv.URL())
	c := newClient(t, nc, client.Options{})
	limit := strconv.FormatInt(nc.MaxPayload(), 10)
	huge := strings.Repeat("x", int(nc.MaxPayload()))
	_, err := c.Submit(b.ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"` + huge + `"}`)})
	if !errors.Is(err, messages.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "max_payload of "+limit) {
		t.Errorf("Submit over max_payload: %v, want %s naming the limit %s", err, messages.CodePayloadTooLarge, limit)
	}
	_, err = c.Call(b.ctx, "t-count", labelArgs{huge})
	if !errors.Is(err, messages.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "max_payload of "+limit) {
		t.Errorf("Call over max_payload: %v, want %s naming the limit %s", err, messages.CodePayloadTooLarge, limit)
	}
	_, err = c.Call(b.ctx, "t-count", labelArgs{strings.Repeat("x", 300<<10)})
	if !errors.Is(err, messages.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "at most 262144") {
		t.Errorf("Call with 300 KiB of arguments: %v, want %s from the coordinator's 256 KiB bound", err, messages.CodePayloadTooLarge)
	}
}
