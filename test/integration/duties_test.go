package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// dutyFollowers counts the consumers on the events stream through which
// coordinators read every call's events for their duties: the audit
// copier's (the queued events, whole) and the sweep's follower (queued and
// result events, headers only). Each is named, so that a test can tell a
// new one from an old one.
func dutyFollowers(t *testing.T, js jetstream.JetStream) (copiers, followers []string) {
	t.Helper()
	ctx := testenv.Context(t)
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	queued, err := names.Filters().EventKind(messages.EventQueued)
	if err != nil {
		t.Fatal(err)
	}
	list := stream.ListConsumers(ctx)
	for info := range list.Info() {
		cfg := info.Config
		switch {
		case cfg.Durable != "":
		case cfg.HeadersOnly:
			followers = append(followers, info.Name)
		case len(cfg.FilterSubjects) == 1 && cfg.FilterSubjects[0] == queued:
			copiers = append(copiers, info.Name)
		}
	}
	if err := list.Err(); err != nil {
		t.Fatal(err)
	}
	return copiers, followers
}

// TestDutiesAreDoneByOneCoordinatorAtATime: of two coordinators, one
// copies audit records and follows the calls for the sweep of settled
// calls, so that a call's events are delivered once for each, not once
// per coordinator. When it stops, the other takes both duties over at
// once; when that one dies (its connection closed, nothing released), a
// third takes them over after the lease's time. Through each change,
// every allowed call appears in audit.list once, and a call its queue
// settled without a result is ended.
func TestDutiesAreDoneByOneCoordinatorAtATime(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	url := srv.URL()
	pol := mustPolicy(t, "default: allow\n")
	config := func(cfg *coordinator.Config) {
		cfg.Policy, cfg.SweepInterval, cfg.DutyLeaseTTL = pol, 100*time.Millisecond, 2*time.Second
	}
	first := testenv.Coordinator(t, url, config)
	testenv.Worker(t, url, worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{newCounter().tool()}})
	c := testenv.Client(t, url, client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	js, err := jetstream.New(testenv.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	call := func(n int, label string) {
		t.Helper()
		for i := range n {
			r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(fmt.Sprintf(`{"label":"%s-%d"}`, label, i)), Wait: true})
			if err != nil || r.Result == nil || r.Result.Status != messages.StateCompleted {
				t.Fatalf("call %s-%d: %+v %v", label, i, r, err)
			}
			ids = append(ids, r.CallID)
		}
	}
	// Every call made so far appears in audit.list, once (so do the calls
	// of settledWithoutResult, which are not counted here).
	audited := func(what string) {
		t.Helper()
		var seen map[string]int
		testenv.Eventually(t, what, func() bool {
			seen = allowedInAuditList(t, c)
			for _, id := range ids {
				if seen[id] == 0 {
					return false
				}
			}
			return true
		})
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("call %s appears %d times in audit.list", id, n)
			}
		}
	}
	var copiers, followers []string
	testenv.Eventually(t, "the first coordinator to copy and follow", func() bool {
		copiers, followers = dutyFollowers(t, js)
		return len(copiers) == 1 && len(followers) == 1
	})

	secondConn := testenv.Connect(t, url)
	testenv.Coordinator(t, url, config, func(cfg *coordinator.Config) { cfg.Conn = secondConn })
	call(40, "two coordinators")
	audited("the calls made beside a standby to be audited")
	// The standby swept every 100 ms while the calls ran and were copied,
	// and did neither duty: the first renewed its lease. On a machine so
	// loaded that the first missed its renewals for the lease's 2 s, the
	// standby took the duties over, as it should, but still alone; a look
	// in the middle of that handover may find neither holding them yet.
	var nowCopiers, nowFollowers []string
	testenv.Eventually(t, "one coordinator to copy and follow beside a standby", func() bool {
		nowCopiers, nowFollowers = dutyFollowers(t, js)
		return len(nowCopiers) == 1 && len(nowFollowers) == 1
	})
	firstHolds := equalNames(nowCopiers, copiers) && equalNames(nowFollowers, followers)
	if !firstHolds {
		t.Logf("with a standby: the duties moved while the holder was busy (copiers %v and followers %v, were %v and %v)", nowCopiers, nowFollowers, copiers, followers)
	}

	// The holder stops: the standby takes over at once.
	stopped := time.Now()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the second coordinator to copy and follow", func() bool {
		nowCopiers, nowFollowers := dutyFollowers(t, js)
		moved := !equalNames(nowCopiers, copiers) && !equalNames(nowFollowers, followers)
		return len(nowCopiers) == 1 && len(nowFollowers) == 1 && (moved || !firstHolds)
	})
	t.Logf("a stopped holder's duties taken over after %v", time.Since(stopped).Round(time.Millisecond))
	call(20, "after a stop")
	audited("the calls made after the holder stopped to be audited")
	settledWithoutResult(t, url, c, "lost1")

	// The new holder dies: a third coordinator takes over after the lease's time.
	testenv.Coordinator(t, url, config)
	secondConn.Close()
	died := time.Now()
	call(20, "after a death")
	audited("the calls made after the holder died to be audited")
	t.Logf("a dead holder's audit copy taken over: the last call audited %v after the death", time.Since(died).Round(time.Millisecond))
	settledWithoutResult(t, url, c, "lost2")
}

func equalNames(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}
