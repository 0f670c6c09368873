package transport

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

// pullBundle is one pull test's server, connection and stream.
type pullBundle struct {
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
	ctx context.Context
}

const (
	pullStream   = "PULL"
	pullConsumer = "C"
)

// setupPull starts a server with a stream, and checks when the test ends
// that it left no goroutine behind. The stream's consumer is the test's to
// create (see consumer).
func setupPull(t *testing.T) *pullBundle {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { leaks.VerifyNone(t, ignore) })
	srv := embedded.Server(t)
	nc := pullConnect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: pullStream, Subjects: []string{"pull.>"}}); err != nil {
		t.Fatal(err)
	}
	return &pullBundle{url: srv.URL(), nc: nc, js: js, ctx: ctx}
}

func pullConnect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (b *pullBundle) consumer(t *testing.T) {
	t.Helper()
	if _, err := b.js.CreateOrUpdateConsumer(b.ctx, pullStream, jetstream.ConsumerConfig{Durable: pullConsumer, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
}

func (b *pullBundle) publish(t *testing.T, n int) {
	t.Helper()
	for range n {
		if _, err := b.js.Publish(b.ctx, "pull.x", []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
}

// requests receives the pull requests for the test's consumer. The
// subscription counts as a responder: with no consumer, the requests are
// lost rather than refused.
func (b *pullBundle) requests(t *testing.T) <-chan *nats.Msg {
	t.Helper()
	return b.watch(t, PullSubject(pullStream, pullConsumer))
}

func (b *pullBundle) watch(t *testing.T, subject string) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 10000)
	nc := pullConnect(t, b.url)
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) { ch <- m }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// pullTaker is a requester whose caller takes up to free messages:
// each delivery uses one up, and the requester asks again whenever it says
// it may, until the test ends.
type pullTaker struct {
	*PullRequester
	mu        sync.Mutex
	free      int
	delivered chan *nats.Msg
	ready     chan struct{}
}

func (b *pullBundle) requester(t *testing.T, cfg PullConfig, free int) *pullTaker {
	t.Helper()
	r := &pullTaker{free: free, delivered: make(chan *nats.Msg, 1000), ready: make(chan struct{}, 1)}
	cfg.Stream, cfg.Consumer = pullStream, pullConsumer
	cfg.Deliver = func(m *nats.Msg) {
		r.mu.Lock()
		r.free--
		r.mu.Unlock()
		r.delivered <- m
	}
	cfg.Ready = r.signal
	pr, err := NewPullRequester(b.nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.PullRequester = pr
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			r.Request(r.freeCount)
			select {
			case <-r.ready:
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		<-stopped
		pr.Close()
	})
	return r
}

func (r *pullTaker) signal() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

func (r *pullTaker) freeCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.free
}

func (r *pullTaker) give(n int) {
	r.mu.Lock()
	r.free += n
	r.mu.Unlock()
	r.signal()
}

func pullReceive(t *testing.T, ch <-chan *nats.Msg, what string) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(2 * time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

// pullQuiet checks that nothing arrives on ch for d.
func pullQuiet(t *testing.T, ch <-chan *nats.Msg, d time.Duration, what string) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("%s: %s %v", what, m.Subject, m.Header)
	case <-time.After(d):
	}
}

func TestPullRequestBody(t *testing.T) {
	var req struct {
		Batch     int   `json:"batch"`
		Expires   int64 `json:"expires"`
		Heartbeat int64 `json:"idle_heartbeat"`
	}
	body := AppendPullRequest(nil, 7, 30*time.Second, 5*time.Second)
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if req.Batch != 7 || req.Expires != int64(30*time.Second) || req.Heartbeat != int64(5*time.Second) {
		t.Fatalf("%s reads as %+v", body, req)
	}
	if got := PullSubject("S", "C"); got != "$JS.API.CONSUMER.MSG.NEXT.S.C" {
		t.Fatalf("subject %s", got)
	}
}

func TestPullMetadata(t *testing.T) {
	for _, tc := range []struct {
		reply  string
		stream string
		domain string
		ok     bool
	}{
		{"$JS.ACK.S.C.2.10.4.1700000000000000000.3", "S", "", true},
		{"$JS.ACK.hub.ACCHASH.S.C.2.10.4.1700000000000000000.3.token", "S", "hub", true},
		{"$JS.ACK._.ACCHASH.S.C.2.10.4.1700000000000000000.3", "S", "", true},
		{"$JS.ACK.S.C.2.10.4.1700000000000000000", "", "", false},
		{"$JS.ACK.S.C.x.10.4.1700000000000000000.3", "", "", false},
		{"_INBOX.abc", "", "", false},
	} {
		meta, err := PullMetadata(tc.reply)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.reply, err)
			continue
		}
		if !tc.ok {
			continue
		}
		if meta.Stream != tc.stream || meta.Consumer != "C" || meta.Domain != tc.domain || meta.NumDelivered != 2 ||
			meta.Sequence.Stream != 10 || meta.Sequence.Consumer != 4 || meta.NumPending != 3 || meta.Timestamp.UnixNano() != 1700000000000000000 {
			t.Errorf("%s reads as %+v", tc.reply, meta)
		}
	}
}

func TestPullRequesterNeverAsksForMoreThanIsFree(t *testing.T) {
	b := setupPull(t)
	b.consumer(t)
	b.publish(t, 5)
	// Heartbeats far apart: a request taken for lost on a busy machine
	// would be asked again, and its messages delivered beyond what is free.
	r := b.requester(t, PullConfig{Expires: 10 * time.Second, Heartbeat: time.Second}, 3)
	for range 3 {
		m := pullReceive(t, r.delivered, "a message")
		if err := m.Respond([]byte("+ACK")); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing is free: no more come, however long the requester waits.
	pullQuiet(t, r.delivered, 300*time.Millisecond, "delivered with nothing free")
	if n := r.Asked(); n != 0 {
		t.Fatalf("%d messages still asked for", n)
	}
	r.give(2)
	pullReceive(t, r.delivered, "a message once freed")
	pullReceive(t, r.delivered, "a message once freed")
}

func TestIdlePullRequestIsKeptByHeartbeats(t *testing.T) {
	b := setupPull(t)
	b.consumer(t)
	requests := b.requests(t)
	// Long enough that a busy machine does not delay a heartbeat by a
	// whole interval.
	const heartbeat = time.Second
	r := b.requester(t, PullConfig{Expires: 30 * time.Second, Heartbeat: heartbeat}, 4)
	pullReceive(t, requests, "the first request")
	// Heard from every heartbeat, the request is not taken as lost: no
	// other goes out in six heartbeat intervals.
	pullQuiet(t, requests, 6*heartbeat, "another request while the first waits")
	if n := r.Asked(); n != 4 {
		t.Fatalf("%d messages asked for, want 4", n)
	}
	b.publish(t, 1)
	pullReceive(t, r.delivered, "the message")
}

func TestLostPullRequestIsAskedAgain(t *testing.T) {
	b := setupPull(t)
	// No consumer answers: a subscriber swallows the requests, as a server
	// that lost them would.
	requests := b.requests(t)
	const heartbeat = 50 * time.Millisecond
	b.requester(t, PullConfig{Expires: 10 * time.Second, Heartbeat: heartbeat}, 4)
	pullReceive(t, requests, "the first request")
	start := time.Now()
	pullReceive(t, requests, "the request asked again")
	if waited := time.Since(start); waited < 2*heartbeat {
		t.Fatalf("asked again after %v, before two heartbeat intervals without news", waited)
	}
}

func TestRefusedPullRequestBacksOff(t *testing.T) {
	b := setupPull(t)
	// The requester's own connection publishes nothing but its requests. A
	// subscriber to the requests' subject would answer for the missing
	// consumer, so they are counted from the connection's statistics.
	b.nc = pullConnect(t, b.url)
	// Without a consumer every request is refused at once (503, no
	// responders); asked again at once, they would number thousands.
	r := b.requester(t, PullConfig{Expires: 10 * time.Second, Heartbeat: time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}, 4)
	<-time.After(time.Second)
	if n := b.nc.Stats().OutMsgs; n > 40 {
		t.Fatalf("%d requests refused in 1s; want a few, backing off up to 100ms", n)
	}
	// And asked again all the same: a few within the second on an idle
	// machine, later on a busy one.
	for deadline := time.Now().Add(2 * time.Minute); b.nc.Stats().OutMsgs < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests refused, and no more asked", b.nc.Stats().OutMsgs)
		}
	}
	// Once the consumer is there, the next request is served.
	b.consumer(t)
	b.publish(t, 1)
	pullReceive(t, r.delivered, "the message once the consumer exists")
}

// Requests forgotten as lost may still be alive on the server and deliver:
// their messages are delivered, beyond what was free, and do not count
// against what the current requests still ask for.
func TestForgottenPullRequestsDeliverUncounted(t *testing.T) {
	b := setupPull(t)
	b.consumer(t)
	requests := b.requests(t)
	r := b.requester(t, PullConfig{Expires: 30 * time.Second, Heartbeat: time.Second}, 2)
	first := pullReceive(t, requests, "the first request")
	r.Forget()
	second := pullReceive(t, requests, "the request asked again after Forget")
	if first.Reply == second.Reply || r.Asked() != 2 {
		t.Fatalf("asked again on %s after %s, asking for %d; want a new inbox, asking for 2", second.Reply, first.Reply, r.Asked())
	}
	// The server shares the messages among its waiting requests.
	b.publish(t, 2)
	current := 0
	for range 2 {
		m := pullReceive(t, r.delivered, "a message")
		if m.Sub.Subject == second.Reply[:strings.LastIndexByte(second.Reply, '.')]+".*" {
			current++
		}
	}
	if n := r.Asked(); n != 2-current {
		t.Fatalf("%d messages asked for after %d of 2 went to the current request; want %d", n, current, 2-current)
	}
}
