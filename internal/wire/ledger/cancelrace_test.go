package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestACancelledCallIsCommittedOnceByRacingWriters: on a replicated events
// stream, the coordinator's cancel of a call it found undelivered (a
// result conditioned on every event of the call) and the worker's result
// for the same call, which heard the cancel notice as the call reached it
// (a result conditioned on the call's results), are written at the same
// moment, again and again; each call ends with one result event, not two.
func TestACancelledCallIsCommittedOnceByRacingWriters(t *testing.T) {
	t.Parallel()
	url := testenv.Cluster(t, 3)
	names := messages.MustNames("")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	coordConn, workerConn := testenv.Connect(t, url), testenv.Connect(t, url)
	coordJS, err := jetstream.New(coordConn)
	if err != nil {
		t.Fatal(err)
	}
	workerJS, err := jetstream.New(workerConn)
	if err != nil {
		t.Fatal(err)
	}
	if err := resources.Ensure(ctx, coordJS, names, resources.Config{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	coordinator, worker := ledger.New(coordConn, coordJS, names), ledger.New(workerConn, workerJS, names)
	stream, err := coordJS.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	const ns, calls = "race", 300
	bucket := messages.TurnBucket("")
	twice := 0
	for i := range calls {
		callID := fmt.Sprintf("race%04d", i)
		now := time.Now().UTC()
		req := &messages.CallRequest{CallID: callID, Tool: ns + "-echo", Namespace: ns, Method: "echo", QueuedAt: now}
		msg, err := coordinator.EventMsg(bucket, ns, &messages.CallEvent{CallID: callID, Kind: messages.EventQueued, Time: now, Request: req})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := coordJS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		cancelled := func(by string) *messages.CallResult {
			return &messages.CallResult{CallID: callID, Tool: req.Tool, Status: messages.StateCancelled, IsError: true,
				Error: &messages.ResultError{Code: messages.ResultCancelled, Message: "cancelled by " + by}, QueuedAt: now, FinishedAt: time.Now().UTC()}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			if err := coordinator.CommitIfUnchanged(ctx, bucket, ns, cancelled("the coordinator"), 0, ""); err != nil && err != ledger.ErrChanged {
				t.Errorf("call %s: the coordinator's commit: %v", callID, err)
			}
		})
		wg.Go(func() {
			<-start
			if _, err := worker.Commit(ctx, bucket, ns, cancelled("the worker"), ""); err != nil {
				t.Errorf("call %s: the worker's commit: %v", callID, err)
			}
		})
		close(start)
		wg.Wait()
		subject, err := names.Events().Subject(bucket, callID, messages.EventResult, ns)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		switch n := info.State.Subjects[subject]; {
		case n == 0:
			t.Fatalf("call %s: no result stored", callID)
		case n > 1:
			twice++
		}
	}
	if twice > 0 {
		t.Fatalf("%d of %d calls were committed twice", twice, calls)
	}
}
