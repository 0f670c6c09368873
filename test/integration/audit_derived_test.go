package integration

import (
	"encoding/json"
	"fmt"
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

// auditRecordsOf returns the audit records of a message of the audit
// stream: one, or those of an AuditBatch.
func auditRecordsOf(t *testing.T, msg jetstream.Msg) []messages.AuditRecord {
	t.Helper()
	if msg.Subject() == names.Prefix()+".audit."+messages.AuditCalls {
		var batch messages.AuditBatch
		if _, err := messages.Decode(messages.Header(msg.Headers()), msg.Data(), &batch); err != nil {
			t.Fatal(err)
		}
		return batch.Records
	}
	var rec messages.AuditRecord
	if _, err := messages.Decode(messages.Header(msg.Headers()), msg.Data(), &rec); err != nil {
		t.Fatal(err)
	}
	return []messages.AuditRecord{rec}
}

// allowedInAuditList pages through audit.list's allowed decisions and
// counts each call's records.
func allowedInAuditList(t *testing.T, c *client.Client) map[string]int {
	t.Helper()
	ctx := testenv.Context(t)
	seen := map[string]int{}
	cursor := ""
	for {
		page, err := c.Operator().ListAudit(ctx, messages.AuditListRequest{Decision: messages.AuditAllowed, Limit: 100, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range page.Records {
			if rec.Decision != messages.AuditAllowed {
				t.Fatalf("audit.list of allowed decisions gave %+v", rec)
			}
			seen[rec.CallID]++
		}
		if page.NextCursor == "" {
			return seen
		}
		cursor = page.NextCursor
	}
}

// TestAuditOfAllowedCallsIsDerivedOnceAcrossCopierStops: an allowed
// call's audit record is copied from its queued event into the audit
// stream. Calls queued while no coordinator copies (the copier stopped
// after they were queued, before it copied them; then a coordinator that
// does not copy) appear in audit.list once a copier runs again, and calls
// queued while a second copier stands by (one coordinator at a time holds
// the duty) appear once: every allowed call exactly once.
func TestAuditOfAllowedCallsIsDerivedOnceAcrossCopierStops(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	pol := mustPolicy(t, "default: allow\n")
	withPolicy := func(copyEvery time.Duration) func(*coordinator.Config) {
		return func(cfg *coordinator.Config) { cfg.Policy, cfg.AuditCopyInterval = pol, copyEvery }
	}
	// Its copier looks once, at its start, and not again before it stops.
	first := testenv.Coordinator(t, srv.URL(), withPolicy(time.Hour))
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{newCounter().tool()}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	var ids []string
	call := func(n int, label string) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(fmt.Sprintf(`{"label":"%s-%d"}`, label, i)), Wait: true})
				if err != nil || r.Result == nil || r.Result.Status != messages.StateCompleted {
					t.Errorf("call %s-%d: %+v %v", label, i, r, err)
					return
				}
				mu.Lock()
				ids = append(ids, r.CallID)
				mu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	call(100, "before")
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, srv.URL(), withPolicy(-1))
	call(100, "uncopied")
	if seen := allowedInAuditList(t, c); len(seen) != 0 {
		t.Fatalf("audit.list has %d allowed calls while no copier ran; want none yet", len(seen))
	}

	// A copier starts: the 200 calls appear, once each.
	testenv.Coordinator(t, srv.URL(), withPolicy(5*time.Millisecond))
	testenv.Eventually(t, "the 200 allowed calls to appear in audit.list", func() bool { return len(allowedInAuditList(t, c)) == 200 })

	// A second copier, standing by (with the default interval).
	testenv.Coordinator(t, srv.URL(), withPolicy(0))
	before := len(ids)
	call(200, "a standby")
	running := map[string]bool{}
	for _, id := range ids[before:] {
		running[id] = true
	}
	lastDone := time.Now()
	testenv.Eventually(t, "the 400 allowed calls to appear in audit.list", func() bool { return len(allowedInAuditList(t, c)) == 400 })
	t.Logf("the last call's audit record appeared %v after the call returned", time.Since(lastDone).Round(time.Millisecond))

	seen := allowedInAuditList(t, c)
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("call %s appears %d times in audit.list", id, seen[id])
		}
	}
	if len(seen) != len(ids) {
		t.Errorf("audit.list holds %d allowed calls, %d were made", len(seen), len(ids))
	}
	// And so in the stream itself, read as an auditor reads it.
	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	cons, err := js.OrderedConsumer(ctx, names.Audit().Stream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int{}
	var lag time.Duration
	for total := 0; total < len(ids); {
		msg, err := cons.Next(jetstream.FetchMaxWait(testenv.Patience))
		if err != nil {
			t.Fatalf("audit records read %d: %v", total, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range auditRecordsOf(t, msg) {
			stored[rec.CallID]++
			total++
			if running[rec.CallID] {
				lag = max(lag, meta.Timestamp.Sub(rec.Time))
			}
		}
	}
	t.Logf("with copiers running, a record was stored at most %v after its call was queued", lag)
	for id, n := range stored {
		if n != 1 {
			t.Errorf("the audit stream holds call %s %d times", id, n)
		}
	}
}

// TestAuditCopierFollowsAfterItsConsumerIsLost: the copier reads the
// queued events through an ephemeral consumer, which a server can lose
// (a restart, a leader change, an operator's cleanup). Calls made after
// the consumer is deleted, once and then while calls run, still appear
// in audit.list exactly once.
func TestAuditCopierFollowsAfterItsConsumerIsLost(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	pol := mustPolicy(t, "default: allow\n")
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy, cfg.AuditCopyInterval = pol, 5*time.Millisecond })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{newCounter().tool()}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	// deleteCopierConsumers deletes the consumers without acknowledgements
	// that deliver bodies: the namespaces' work queues acknowledge, the
	// copier's does not, and the sweep's follower delivers headers only.
	deleteCopierConsumers := func() int {
		deleted := 0
		for info := range stream.ListConsumers(ctx).Info() {
			if info.Config.AckPolicy == jetstream.AckNonePolicy && !info.Config.HeadersOnly {
				if err := stream.DeleteConsumer(ctx, info.Name); err == nil {
					deleted++
				}
			}
		}
		return deleted
	}
	made := 0
	call := func(n int) {
		for i := range n {
			r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(fmt.Sprintf(`{"label":"l-%d"}`, made+i)), Wait: true})
			if err != nil || r.Result == nil || r.Result.Status != messages.StateCompleted {
				t.Fatalf("call %d: %+v %v", made+i, r, err)
			}
		}
		made += n
	}
	call(20)
	testenv.Eventually(t, "the first 20 allowed calls in audit.list", func() bool { return len(allowedInAuditList(t, c)) == 20 })
	if n := deleteCopierConsumers(); n != 1 {
		t.Fatalf("deleted %d copier consumers, want 1", n)
	}
	call(20)
	// Deleted again while calls run.
	var wg sync.WaitGroup
	wg.Go(func() { call(40) })
	testenv.Eventually(t, "the copier to follow again", func() bool { return deleteCopierConsumers() == 1 })
	wg.Wait()
	testenv.Eventually(t, "all the allowed calls in audit.list", func() bool { return len(allowedInAuditList(t, c)) == made })
	for id, n := range allowedInAuditList(t, c) {
		if n != 1 {
			t.Errorf("call %s appears %d times in audit.list", id, n)
		}
	}
}

// TestAuditBatchesAreBounded: records that arrive together are written in
// batches of at most about 256 KiB of arguments each, never one message
// for all of them, and each record once.
func TestAuditBatchesAreBounded(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	pol := mustPolicy(t, "default: allow\n")
	withCopier := func(every time.Duration) func(*coordinator.Config) {
		return func(cfg *coordinator.Config) { cfg.Policy, cfg.AuditCopyInterval = pol, every }
	}
	testenv.Coordinator(t, srv.URL(), withCopier(-1))
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{newCounter().tool()}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	const calls, argBytes = 30, 24 << 10
	for i := range calls {
		label := fmt.Sprintf("%d-%s", i, strings.Repeat("x", argBytes))
		args, _ := json.Marshal(map[string]string{"label": label})
		r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(args), Wait: true})
		if err != nil || r.Result == nil || r.Result.Status != messages.StateCompleted {
			t.Fatalf("call %d: %+v %v", i, r, err)
		}
	}
	// A copier starts with 30 records of 24 KiB waiting.
	testenv.Coordinator(t, srv.URL(), withCopier(5*time.Millisecond))
	testenv.Eventually(t, "the 30 allowed calls in audit.list", func() bool { return len(allowedInAuditList(t, c)) == calls })

	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	cons, err := js.OrderedConsumer(ctx, names.Audit().Stream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.Prefix() + ".audit." + messages.AuditCalls}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for batches := 0; len(seen) < calls; batches++ {
		msg, err := cons.Next(jetstream.FetchMaxWait(testenv.Patience))
		if err != nil {
			t.Fatalf("audit batches read %d: %v", batches, err)
		}
		if len(msg.Data()) > 300<<10 {
			t.Errorf("an audit batch of %d bytes holds %d records", len(msg.Data()), len(auditRecordsOf(t, msg)))
		}
		for _, rec := range auditRecordsOf(t, msg) {
			seen[rec.CallID]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("call %s is in %d batches", id, n)
		}
	}
}
