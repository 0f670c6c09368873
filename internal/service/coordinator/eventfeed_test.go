package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// feedConsumer returns the name of the event feed's consumer on the
// events stream: the one that follows progress events of every call.
func feedConsumer(ctx context.Context, t *testing.T, stream jetstream.Stream) string {
	t.Helper()
	names, _ := messages.NewNames("")
	progress, err := names.Filters().EventKind(messages.EventProgress)
	if err != nil {
		t.Fatal(err)
	}
	list := stream.ListConsumers(ctx)
	found := ""
	for info := range list.Info() {
		if slices.Contains(info.Config.FilterSubjects, progress) {
			found = info.Name
		}
	}
	if err := list.Err(); err != nil {
		t.Fatal(err)
	}
	return found
}

// describe is an event as a watcher reads it, without its time.
func describe(ev *messages.CallEvent) string {
	switch {
	case ev.Log != nil:
		return string(ev.Kind) + " " + ev.Log.Message
	case ev.Result != nil:
		return string(ev.Kind) + " " + string(ev.Result.Status)
	}
	return string(ev.Kind)
}

// TestWatchersOfTheEventFeedSeeEveryEventOnce: once enough waits are held
// (here one), the coordinator answers calls.events from one consumer of
// the events stream. Watchers of several busy calls, through it, each
// read exactly the call's events, in order, that a reader of the stream
// reads: when they keep up; when one falls more than the feed keeps of a
// call behind; when another namespace writes an event under a call's ID;
// and when the feed's consumer is deleted halfway.
func TestWatchersOfTheEventFeedSeeEveryEventOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.EventFeedThreshold = 1 })
	const calls, lines = 3, 300 // more lines than the feed keeps of a call
	begin, resume := make(chan struct{}), make(chan struct{})
	var halfwayOnce sync.WaitGroup
	halfwayOnce.Add(calls)
	tool := worker.Func("chatty", "Logs many lines.", func(ctx context.Context, in struct{}) (string, error) {
		<-begin
		for i := range lines {
			if i == lines/2 {
				halfwayOnce.Done()
				<-resume
			}
			worker.Log(ctx, "info", fmt.Sprintf("line %d", i))
		}
		return "done", nil
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "feed", Tools: []worker.Tool{tool}, Slots: calls})
	ctx := testenv.Context(t)
	viaCoordinator := testenv.Client(t, srv.URL(), client.Options{CoordinatorReads: true})
	viaStream := testenv.Client(t, srv.URL(), client.Options{})

	var ids []string
	for range calls {
		r, err := viaCoordinator.Submit(ctx, messages.SubmitRequest{Tool: "feed-chatty"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.CallID)
	}
	// Two watchers of each call; the second of the first call stops after
	// its first event until every line is written and the first has read
	// the result, so that it asks for what the feed no longer keeps.
	type watched struct {
		call   int
		events []string
		err    error
	}
	out := make(chan watched, 2*calls)
	firstSeen, fastDone := make(chan struct{}), make(chan struct{})
	allWritten := make(chan struct{})
	for i, id := range ids {
		for w := range 2 {
			go func() {
				got := watched{call: i}
				defer func() { out <- got }()
				if i == 0 && w == 0 {
					defer close(fastDone)
				}
				for ev, err := range viaCoordinator.Watch(ctx, id) {
					if err != nil {
						got.err = err
						return
					}
					got.events = append(got.events, describe(ev))
					if i == 0 && w == 1 && len(got.events) == 1 {
						close(firstSeen)
						<-allWritten
						// The fast watcher read the result, through the feed:
						// the feed has gone past every event of the call.
						<-fastDone
					}
				}
			}()
		}
	}
	<-firstSeen
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	names, _ := messages.NewNames("")
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the event feed's consumer", func() bool { return feedConsumer(ctx, t, stream) != "" })

	// Another namespace's event under the first call's ID counts for no one.
	forged, err := names.Events().Subject(messages.TurnBucket(""), ids[0], messages.EventLog, "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	forgedEvent, err := messages.Msgpack.Marshal(&messages.CallEvent{CallID: ids[0], Kind: messages.EventLog, Time: time.Now().UTC(), Log: &messages.LogEntry{Level: "info", Message: "forged"}})
	if err != nil {
		t.Fatal(err)
	}
	close(begin)
	halfwayOnce.Wait()
	if _, err := js.Publish(ctx, forged, forgedEvent); err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteConsumer(ctx, feedConsumer(ctx, t, stream)); err != nil {
		t.Fatal(err)
	}
	close(resume)
	for _, id := range ids {
		if _, err := viaCoordinator.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	close(allWritten)

	want := make([][]string, calls)
	for i, id := range ids {
		for ev, err := range viaStream.Watch(ctx, id) {
			if err != nil {
				t.Fatal(err)
			}
			want[i] = append(want[i], describe(ev))
		}
		if logs := strings.Count(strings.Join(want[i], "\n"), "log line "); logs != lines {
			t.Fatalf("the stream holds %d of call %d's %d lines", logs, i, lines)
		}
	}
	for range 2 * calls {
		got := <-out
		if got.err != nil {
			t.Fatalf("a watcher of call %d: %v", got.call, got.err)
		}
		if !slices.Equal(got.events, want[got.call]) {
			t.Errorf("a watcher of call %d read %d events, the stream holds %d:\n%s\nwant\n%s", got.call, len(got.events), len(want[got.call]),
				strings.Join(got.events, "\n"), strings.Join(want[got.call], "\n"))
		}
	}
}
