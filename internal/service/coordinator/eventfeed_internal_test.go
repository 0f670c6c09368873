package coordinator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// TestTheEventFeedStopsWhenItsWatchersLeave: once no call is asked about
// for its idle time, the feed deletes its consumer, forgets its calls
// and wakes the waits that were left on it, which then read the stream
// (after answers not ok); a wait afterwards starts it again.
func TestTheEventFeedStopsWhenItsWatchersLeave(t *testing.T) {
	t.Parallel()
	_, _, js, names := jetStreamEnv(t)
	ctx := context.Background()
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	feed := newEventFeed(stream, names, 1, slog.New(slog.DiscardHandler))
	feed.idle = 200 * time.Millisecond
	t.Cleanup(func() { _ = feed.close(ctx) })
	consumers := func() int {
		n := 0
		for range stream.ListConsumers(ctx).Info() {
			n++
		}
		return n
	}

	leave := feed.enter()
	eventually(t, "the feed to follow", func() bool { return feed.track("call-1", "demo", messages.TurnBucket(""), time.Now()) })
	if consumers() != 1 {
		t.Fatalf("%d consumers on the events stream while the feed runs, want 1", consumers())
	}
	_, changed, ok := feed.after("call-1", feed.position(), 10, 0)
	if !ok {
		t.Fatal("the feed cannot answer for a call it tracks from its position on")
	}
	leave()
	select {
	case <-changed:
	case <-time.After(time.Minute):
		t.Fatal("a wait on the feed was not woken when the feed stopped")
	}
	if _, _, ok := feed.after("call-1", 0, 10, 0); ok {
		t.Fatal("a stopped feed still answers")
	}
	eventually(t, "the feed's consumer to be deleted", func() bool { return consumers() == 0 })

	leave = feed.enter()
	defer leave()
	eventually(t, "the feed to follow again", func() bool { return feed.track("call-2", "demo", messages.TurnBucket(""), time.Now()) })
}

// eventually polls check until it holds, for a minute at most: the
// feed's state sends no signal when it changes.
func eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !check(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
