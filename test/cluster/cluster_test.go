package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

const (
	// stuckAfter is how long past its tool's time a call may take before
	// it counts as stuck: longer than the whole load runs, on a busy
	// machine too, so that a call counts as stuck when it does not end,
	// not when it ends late. How late calls end is measured (MaxOvertime)
	// and reported, and calls later than slowAfter are named in the log.
	stuckAfter = 3 * time.Minute
	// slowAfter names, in the log, the calls that ended this long past
	// their tool's time.
	slowAfter = 10 * time.Second
	// minIteration paces each load loop.
	minIteration = 250 * time.Millisecond
)

// callRecord is one call of the load as its caller saw it.
type callRecord struct {
	style     string
	callID    string
	sleep     time.Duration // the tool's own time
	submitted time.Time
	ended     time.Time
	status    messages.CallState
	err       error  // the submit was refused, or the wait failed
	cancelled bool   // the caller cancelled it
	failure   string // the result's error, when it has one
	cancelErr error  // the caller's cancel failed
}

type recorder struct {
	mu    sync.Mutex
	calls []*callRecord
}

func (r *recorder) add(c *callRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

func (r *recorder) snapshot() []*callRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// kill is one SIGKILL of the test and what callers saw around it.
type killReport struct {
	Target        string        `json:"target"`
	Node          string        `json:"node"`
	NewLeader     string        `json:"new_leader"`
	Election      time.Duration `json:"election_ns"`
	LongestStall  time.Duration `json:"longest_stall_ns"`
	FirstComplete time.Duration `json:"first_completed_call_ns"`
	at            time.Time
	until         time.Time
}

// TestClusterSurvivesLeaderKills runs the stack at 3 replicas on three
// nats-server processes without authentication, as toolbus dev's
// processes would in a cluster: clients read the events stream
// themselves. It puts a mixed load through two coordinators and two
// workers, and SIGKILLs the meta leader, the events stream's leader and
// the demo namespace consumer's leader in turn, restarting each on its
// store. Then every call must have ended with exactly one result, no
// submit refused, no tool started twice, every call's ledger complete,
// and the namespace's consumer left with nothing pending.
//
// "Run twice" is counted from the started events: no worker dies in this
// test, so a call with two started events is a tool run again although its
// worker lived (the demo tools cannot count their own runs).
func TestClusterSurvivesLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startCluster(t, 3)
	nodes.awaitMetaLeader(t)
	urls := nodes.urls()
	admin := testenv.Connect(t, urls)
	coordinatorBin := testenv.Binary(t, "./cmd/coordinator")
	for i := range 2 {
		args := []string{"--server", urls}
		if i == 0 {
			args = append(args, "--replicas", "3")
		}
		coord := testenv.Start(t, coordinatorBin, args...)
		coord.WaitLine(t, "coordinator started")
	}
	for _, id := range []string{"w1", "w2"} {
		w := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", urls, "--demo", "--id", id)
		w.WaitLine(t, "worker "+id+" ready")
	}
	ix := testenv.Start(t, testenv.Binary(t, "./cmd/indexer"), "--server", urls)
	ix.WaitLine(t, "indexer started")
	leaderKills(t, &stack{nodes: nodes, urls: urls, admin: admin,
		client: testenv.Client(t, urls, client.Options{}), notify: testenv.Connect(t, urls)})
}

// TestDeployedClusterSurvivesLeaderKills is the same test on the
// three-node configuration of deploy/nats/cluster as shipped (only ports
// and store directories rewritten), with its accounts and users and
// identities: two coordinators with --identities, workers, the indexer
// and the agent as their shipped users. The agent's user has no
// JetStream: it follows its calls through the coordinators
// (CoordinatorReads), on its user's route.
func TestDeployedClusterSurvivesLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startDeployedCluster(t)
	nodes.awaitMetaLeader(t)
	urls := nodes.urls()
	deploy := deployDir(t)
	as := func(user, password string) []string {
		return []string{"--server", urls, "--user", user, "--password", password}
	}
	coordinatorBin := testenv.Binary(t, "./cmd/coordinator")
	for i := range 2 {
		args := append(as("coordinator", "coordinator-secret"), "--identities", filepath.Join(deploy, "identities.yaml"))
		if i == 0 {
			args = append(args, "--replicas", "3")
		}
		coord := testenv.Start(t, coordinatorBin, args...)
		coord.WaitLine(t, "coordinator started")
	}
	for _, id := range []string{"w1", "w2"} {
		w := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), append(as("worker_demo", "worker-demo-secret"), "--demo", "--id", id)...)
		w.WaitLine(t, "worker "+id+" ready")
	}
	ix := testenv.Start(t, testenv.Binary(t, "./cmd/indexer"), as("indexer", "indexer-secret")...)
	ix.WaitLine(t, "indexer started")
	user := func(name, password string) *nats.Conn {
		return testenv.Connect(t, urls, nats.UserInfo(name, password), nats.CustomInboxPrefix(natsflags.InboxPrefix(name)))
	}
	agent, err := client.New(user("agent_a", "agent-a-secret"), client.Options{Agent: "support-bot", CoordinatorReads: true, Route: "agentAroute00000000001"})
	if err != nil {
		t.Fatal(err)
	}
	leaderKills(t, &stack{nodes: nodes, urls: urls, admin: user("coordinator", "coordinator-secret"), client: agent, route: "agentAroute00000000001"})
}

// awaitMetaLeader waits until every node is healthy and they agree on a
// meta leader, before Toolbus starts on the cluster.
func (c *cluster) awaitMetaLeader(t *testing.T) {
	t.Helper()
	poll(t, testenv.Patience, "the cluster to elect a meta leader", func(ctx context.Context) error {
		for _, n := range c.nodes {
			if err := n.healthy(ctx); err != nil {
				return err
			}
		}
		if _, err := c.metaLeader(ctx); err != nil {
			return err
		}
		return c.allPeersOnline(ctx)
	})
}

// allPeersOnline reports, from the meta leader's view, whether every other
// node is an online peer: until it is, the leader counts it offline and
// refuses to place a replicated stream ("no suitable peers for
// placement, peer offline"), which a coordinator started at once would
// meet.
func (c *cluster) allPeersOnline(ctx context.Context) error {
	for _, n := range c.nodes {
		info, err := n.jsz(ctx)
		if err != nil || info.Meta == nil || len(info.Meta.Replicas) == 0 {
			continue // not the leader: only it lists the peers
		}
		if len(info.Meta.Replicas) != len(c.nodes)-1 {
			return fmt.Errorf("the meta leader knows %d peers of %d", len(info.Meta.Replicas), len(c.nodes)-1)
		}
		// Only "offline" matters for placement; "current" can stay false
		// for a follower of an idle meta group.
		for _, r := range info.Meta.Replicas {
			if r.Offline {
				return fmt.Errorf("the meta leader counts peer %s offline", r.Name)
			}
		}
		return nil
	}
	return errors.New("no node lists the meta group's peers yet")
}

// stack is a cluster with Toolbus running on it, and how the load reaches it.
type stack struct {
	nodes *cluster
	urls  string
	// admin reads the streams and consumers: the test's own view.
	admin *nats.Conn
	// client makes the load's calls.
	client *client.Client
	// notify, when set, receives the results of the notify style's calls.
	notify *nats.Conn
	// route is the route of the route style's calls; "" names a new one
	// for each.
	route string
}

// leaderKills puts the load through st while it kills each leader in
// turn, and judges what became of every call.
func leaderKills(t *testing.T, st *stack) {
	nodes := st.nodes
	names := messages.MustNames("")
	streams := []string{names.EventsStream()}
	consumerName, err := names.Consumers().Durable(demo.Name)
	if err != nil {
		t.Fatal(err)
	}
	consumers := [][2]string{{names.EventsStream(), consumerName}}
	js, err := jetstream.New(st.admin)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, testenv.Patience, "every stream and consumer at 3 current replicas", func(ctx context.Context) error {
		return nodes.whole(ctx, js, streams, consumers)
	})

	c := st.client
	rec := &recorder{}
	probes := &recorder{}
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopLoad := func() { stopOnce.Do(func() { close(stop) }) }
	t.Cleanup(stopLoad)
	var load sync.WaitGroup
	run := func(n int, f func()) {
		for range n {
			load.Add(1)
			go func() {
				defer load.Done()
				// An iteration takes at least minIteration, so that
				// calls failing at once do not flood the queue.
				for {
					next := time.NewTimer(minIteration)
					f()
					select {
					case <-stop:
						next.Stop()
						return
					case <-next.C:
					}
				}
			}()
		}
	}
	sleepArgs := func() (time.Duration, messages.JSON) {
		s := 1 + rand.IntN(3)
		return time.Duration(s) * time.Second, messages.JSON(fmt.Sprintf(`{"seconds":%d}`, s))
	}
	// Every wait is bounded: a call that does not end within its tool's
	// time and stuckAfter is stuck.
	callCtx := func(sleep time.Duration) (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), sleep+stuckAfter)
	}
	finish := func(r *callRecord, res *messages.CallResult, err error) {
		r.ended = time.Now()
		r.err = err
		if res != nil {
			r.status = res.Status
			if r.callID == "" {
				r.callID = res.CallID
			}
			if res.Error != nil {
				r.failure = res.Error.Code + ": " + res.Error.Message
			}
		}
		rec.add(r)
	}
	// Plain calls: Call on the client's route, quiet submits.
	run(3, func() {
		sleep, args := sleepArgs()
		r := &callRecord{style: "plain", sleep: sleep, submitted: time.Now()}
		ctx, cancel := callCtx(sleep)
		defer cancel()
		res, err := c.Call(ctx, "demo-sleep", args)
		finish(r, res, err)
	})
	// Idempotent calls, each key sent twice at once: one call, one run.
	run(2, func() {
		sleep, args := sleepArgs()
		key := nuid.Next()
		var pair sync.WaitGroup
		for range 2 {
			pair.Add(1)
			go func() {
				defer pair.Done()
				r := &callRecord{style: "idempotent", sleep: sleep, submitted: time.Now()}
				ctx, cancel := callCtx(sleep)
				defer cancel()
				res, err := c.Call(ctx, "demo-sleep", args, client.WithIdempotencyKey(key))
				finish(r, res, err)
			}()
		}
		pair.Wait()
	})
	// Notify and route submits, followed with Wait; and cancels.
	submitThenWait := func(style string, req messages.SubmitRequest, sleep time.Duration, cancelIt bool) {
		r := &callRecord{style: style, sleep: sleep, submitted: time.Now(), cancelled: cancelIt}
		ctx, cancel := callCtx(sleep)
		defer cancel()
		reply, err := c.Submit(ctx, req)
		if err != nil {
			finish(r, nil, fmt.Errorf("submit refused: %w", err))
			return
		}
		r.callID = reply.CallID
		if cancelIt {
			_, r.cancelErr = c.Cancel(ctx, reply.CallID, "the test cancels")
		}
		res, err := c.Wait(ctx, reply.CallID)
		finish(r, res, err)
	}
	if nc := st.notify; nc != nil {
		run(2, func() {
			sub, err := nc.SubscribeSync(nc.NewInbox())
			if err != nil {
				t.Error(err)
				return
			}
			defer sub.Unsubscribe()
			sleep, args := sleepArgs()
			submitThenWait("notify", messages.SubmitRequest{Tool: "demo-sleep", Arguments: args, Notify: sub.Subject}, sleep, false)
		})
	}
	run(2, func() {
		sleep, args := sleepArgs()
		route := st.route
		if route == "" {
			route = nuid.Next()
		}
		submitThenWait("route", messages.SubmitRequest{Tool: "demo-sleep", Arguments: args, Route: route}, sleep, false)
	})
	run(1, func() {
		submitThenWait("cancel", messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":3}`)}, 3*time.Second, true)
	})
	// Probes: echo calls, whose latency is all stall, five a second, each
	// on its own so that one stuck probe does not stop the others.
	load.Add(1)
	go func() {
		defer load.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			load.Add(1)
			go func() {
				defer load.Done()
				r := &callRecord{style: "probe", submitted: time.Now()}
				ctx, cancel := callCtx(0)
				defer cancel()
				res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "probe"})
				finish(r, res, err)
				probes.add(r)
			}()
		}
	}()
	completedSince := func(since time.Time) func(context.Context) error {
		return func(context.Context) error {
			n := 0
			for _, p := range probes.snapshot() {
				if p.submitted.After(since) && p.err == nil && p.status == messages.StateCompleted {
					n++
				}
			}
			if n < 5 {
				return fmt.Errorf("%d probe calls completed", n)
			}
			return nil
		}
	}
	poll(t, testenv.Patience, "calls to complete before the first kill", completedSince(time.Now()))

	leaders := []struct {
		target string
		find   func(ctx context.Context) (string, error)
	}{
		{"meta leader", nodes.metaLeader},
		{"events stream leader", func(ctx context.Context) (string, error) {
			s, err := js.Stream(ctx, names.EventsStream())
			if err != nil {
				return "", err
			}
			if ci := s.CachedInfo().Cluster; ci != nil && ci.Leader != "" {
				return ci.Leader, nil
			}
			return "", errors.New("events stream has no leader")
		}},
		{"namespace consumer leader", func(ctx context.Context) (string, error) {
			cons, err := js.Consumer(ctx, names.EventsStream(), consumerName)
			if err != nil {
				return "", err
			}
			if ci := cons.CachedInfo().Cluster; ci != nil && ci.Leader != "" {
				return ci.Leader, nil
			}
			return "", errors.New("consumer has no leader")
		}},
	}
	var kills []*killReport
	for _, l := range leaders {
		var name string
		poll(t, testenv.Patience, "find the "+l.target, func(ctx context.Context) (err error) {
			name, err = l.find(ctx)
			return err
		})
		n := nodes.node(t, name)
		k := &killReport{Target: l.target, Node: name, at: time.Now()}
		nodes.kill(t, n)
		election, err := pollWithin(testenv.Patience, electionAttempt, func(ctx context.Context) error {
			leader, err := l.find(ctx)
			if err != nil {
				return err
			}
			if leader == name {
				return fmt.Errorf("%s is still %s", l.target, name)
			}
			k.NewLeader = leader
			return nil
		})
		if err != nil {
			t.Fatalf("a new %s: not within %s: %v", l.target, testenv.Patience, err)
		}
		k.Election = election
		t.Logf("killed %s %s; %s elected after %s", l.target, name, k.NewLeader, k.Election)
		nodes.start(t, n)
		poll(t, 2*testenv.Patience, "the cluster whole again after restarting "+name, func(ctx context.Context) error {
			return nodes.whole(ctx, js, streams, consumers)
		})
		// Not fatal: the assertions below say what became of the calls.
		if _, err := pollFor(stuckAfter, completedSince(time.Now())); err != nil {
			t.Errorf("calls did not complete within %s after restarting %s: %v", stuckAfter, name, err)
		}
		k.until = time.Now()
		kills = append(kills, k)
	}
	stopLoad()
	load.Wait()
	// Every call ended, so every work item must be settled: a call left
	// pending or unacknowledged would be delivered again, or never.
	if _, err := pollFor(testenv.Patience, func(ctx context.Context) error {
		cons, err := js.Consumer(ctx, names.EventsStream(), consumerName)
		if err != nil {
			return err
		}
		if info := cons.CachedInfo(); info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("%d calls pending, %d unacknowledged", info.NumPending, info.NumAckPending)
		}
		return nil
	}); err != nil {
		t.Errorf("the namespace's consumer is not settled once the load ended: %v", err)
	}

	calls := rec.snapshot()
	for _, k := range kills {
		k.LongestStall, k.FirstComplete = stallAround(calls, probes.snapshot(), k.at, k.until)
	}
	ledger := readLedger(t, js, names)
	verdict := judge(calls, ledger)
	report := struct {
		Failed      bool           `json:"failed"`
		Calls       int            `json:"calls"`
		Kills       []*killReport  `json:"kills"`
		MaxOvertime time.Duration  `json:"max_wait_beyond_tool_ns"`
		Failures    map[string]int `json:"failures"`
	}{Failed: t.Failed() || len(verdict.failures) > 0, Calls: len(calls), Kills: kills, MaxOvertime: verdict.maxOvertime, Failures: verdict.counts()}
	line, _ := json.Marshal(report)
	t.Logf("cluster report: %s", line)
	if path := os.Getenv("TOOLBUS_CLUSTER_REPORT"); path != "" {
		// One line per run, appended, so that repeated runs add up.
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = fmt.Fprintf(f, "{\"test\":%q,\"report\":%s}\n", t.Name(), line)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			t.Error(err)
		}
	}
	for _, k := range kills {
		t.Logf("%s %s killed: new leader %s after %s; longest caller stall %s; first completed call %s after the kill",
			k.Target, k.Node, k.NewLeader, k.Election, k.LongestStall, k.FirstComplete)
	}
	for _, slow := range verdict.slow {
		t.Logf("slow: %s", slow)
	}
	for _, f := range verdict.failures {
		t.Errorf("%s: %d calls, e.g. %s", f.what, len(f.examples), strings.Join(first(f.examples, 5), "; "))
	}
}

// stallAround returns, of the calls in flight at or submitted after at
// and before until, the longest any waited beyond its tool's own time
// (a probe's is none), and how long after at the first probe submitted
// after at completed.
func stallAround(calls, probes []*callRecord, at, until time.Time) (longest, firstComplete time.Duration) {
	firstComplete = -1
	for _, c := range calls {
		if c.ended.Before(at) || c.submitted.After(until) || c.ended.IsZero() {
			continue
		}
		if d := c.ended.Sub(c.submitted) - c.sleep; d > longest {
			longest = d
		}
	}
	for _, p := range probes {
		if p.submitted.After(at) && p.err == nil && p.status == messages.StateCompleted && !p.submitted.After(until) {
			if d := p.ended.Sub(at); firstComplete < 0 || d < firstComplete {
				firstComplete = d
			}
		}
	}
	return longest, firstComplete
}

// resultMessage is a result's error message, or "" for a success.
func resultMessage(r *messages.CallResult) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Message
}

// callLedger is what the events stream holds of one call.
type callLedger struct {
	queued  int
	started []int // attempts
	// results describe each result event: its state, sequence, subject,
	// writer and time, so that a call committed twice tells whether both
	// writes met the same condition (one subject) or not.
	results []string
	// result is the first result stored, with its times.
	result *messages.CallResult
	// queuedAt is when the call's queued event was written.
	queuedAt time.Time
	// storedAt is when the stream stored the first result: after its
	// FinishedAt by as long as the worker took to have it written.
	storedAt time.Time
}

// readLedger reads the whole events stream.
func readLedger(t *testing.T, js jetstream.JetStream, names messages.Names) map[string]*callLedger {
	t.Helper()
	var s jetstream.Stream
	if _, err := pollFor(testenv.Patience, func(ctx context.Context) (err error) {
		s, err = js.Stream(ctx, names.EventsStream())
		return err
	}); err != nil {
		t.Fatalf("events stream: %v", err)
	}
	last := s.CachedInfo().State.LastSeq
	out := map[string]*callLedger{}
	// One direct get per message: each is retried on its own while the
	// stream settles, where a consumer would have to be recreated.
	for seq := uint64(1); seq <= last; seq++ {
		var msg *jetstream.RawStreamMsg
		if _, err := pollFor(testenv.Patience, func(ctx context.Context) (err error) {
			msg, err = s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil
			}
			return err
		}); err != nil {
			t.Fatalf("read event %d of the events stream: %v", seq, err)
		}
		if msg == nil {
			continue
		}
		var ev messages.CallEvent
		if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &ev); err != nil {
			t.Fatalf("decode event %s: %v", msg.Subject, err)
		}
		l := out[ev.CallID]
		if l == nil {
			l = &callLedger{}
			out[ev.CallID] = l
		}
		switch ev.Kind {
		case messages.EventQueued:
			l.queued++
			l.queuedAt = ev.Time
		case messages.EventStarted:
			l.started = append(l.started, ev.Attempt)
		case messages.EventResult:
			if ev.Result != nil {
				l.results = append(l.results, fmt.Sprintf("%s #%d %s by %q attempt %d at %s (%s)", ev.Result.Status, seq, msg.Subject, ev.Result.Worker, ev.Result.Attempt, msg.Time.Format("15:04:05.000"), resultMessage(ev.Result)))
				if l.result == nil {
					l.result = ev.Result
					l.storedAt = msg.Time
				}
			}
		}
	}
	return out
}

type failure struct {
	what     string
	examples []string
}

type verdict struct {
	failures    []*failure
	maxOvertime time.Duration
	// slow names the calls that ended more than slowAfter late.
	slow []string
}

func (v *verdict) add(what, example string) {
	for _, f := range v.failures {
		if f.what == what {
			f.examples = append(f.examples, example)
			return
		}
	}
	v.failures = append(v.failures, &failure{what: what, examples: []string{example}})
}

func (v *verdict) counts() map[string]int {
	out := map[string]int{}
	for _, f := range v.failures {
		out[f.what] = len(f.examples)
	}
	return out
}

// judge holds every call against the assertions, naming each failure by
// the cause it points to.
func judge(calls []*callRecord, ledger map[string]*callLedger) *verdict {
	v := &verdict{}
	sort.Slice(calls, func(i, j int) bool { return calls[i].submitted.Before(calls[j].submitted) })
	byID := map[string][]*callRecord{}
	for _, c := range calls {
		desc := fmt.Sprintf("%s call %s submitted %s", c.style, c.callID, c.submitted.Format("15:04:05.000"))
		if c.err != nil {
			switch {
			case errors.Is(c.err, context.DeadlineExceeded):
				v.add(fmt.Sprintf("stuck: the caller waited %s past the tool's time (SDK requests unbounded, or the call lost)", stuckAfter), fmt.Sprintf("%s: %v", desc, c.err))
			case errors.Is(c.err, messages.ErrCallNotFound):
				v.add("call_not_found for a call its submit acknowledged (queued without its queued event)", fmt.Sprintf("%s: %v", desc, c.err))
			case errors.Is(c.err, messages.ErrUnavailable), errors.Is(c.err, messages.ErrNoResponders), strings.HasPrefix(c.err.Error(), "submit refused"):
				v.add("refused submits (the coordinator does not wait for a stream leader)", fmt.Sprintf("%s: %v", desc, c.err))
			default:
				v.add("calls that returned another error", fmt.Sprintf("%s: %v", desc, c.err))
			}
		}
		if c.cancelErr != nil {
			what := "cancels that failed"
			if errors.Is(c.cancelErr, messages.ErrCallNotFound) {
				what = "call_not_found for a call its submit acknowledged (queued without its queued event)"
			}
			v.add(what, fmt.Sprintf("%s: cancel: %v", desc, c.cancelErr))
		}
		if c.callID == "" {
			continue
		}
		byID[c.callID] = append(byID[c.callID], c)
		if c.err == nil && c.status != messages.StateCompleted && !(c.cancelled && c.status == messages.StateCancelled) {
			what := "calls that ended " + string(c.status)
			switch {
			case strings.Contains(c.failure, "10158"):
				what += " with 10158 (concurrent idempotent submits)"
			case strings.Contains(c.failure, "max_attempts") || strings.Contains(c.failure, "attempts"):
				what += " after its attempts (attempts spent without running)"
			}
			v.add(what, desc+": "+c.failure)
		}
		if c.err == nil {
			over := c.ended.Sub(c.submitted) - c.sleep
			if over > v.maxOvertime {
				v.maxOvertime = over
			}
			if over > slowAfter {
				phases := ""
				if l := ledger[c.callID]; l != nil && l.result != nil {
					r := l.result
					phases = fmt.Sprintf(": submit→queued %s, queued→started %s, ran %s, finished→stored %s, stored→caller %s (attempt %d on %s)",
						l.queuedAt.Sub(c.submitted).Round(time.Millisecond), r.StartedAt.Sub(l.queuedAt).Round(time.Millisecond),
						r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond), l.storedAt.Sub(r.FinishedAt).Round(time.Millisecond),
						c.ended.Sub(l.storedAt).Round(time.Millisecond), r.Attempt, r.Worker)
				}
				v.slow = append(v.slow, fmt.Sprintf("%s ended %s past its tool's time%s", desc, over, phases))
			}
		}
	}
	for id, recs := range byID {
		desc := fmt.Sprintf("%s call %s", recs[0].style, id)
		l := ledger[id]
		if l == nil {
			v.add("lost: acknowledged, nothing in the events stream", desc)
			continue
		}
		if len(l.results) == 0 {
			v.add("lost: acknowledged, no result in the events stream", desc)
		}
		if len(l.results) > 1 {
			v.add("committed twice (more than one result event)", fmt.Sprintf("%s: results %v", desc, l.results))
		}
		if l.queued == 0 {
			v.add("ledger incomplete: no queued event (queued without its queued event)", desc)
		}
		if len(l.started) > 1 {
			v.add("tool run twice without a worker dying (an attempt handed back, or spent, although its worker lived)", fmt.Sprintf("%s: started at attempts %v", desc, l.started))
		}
		if recs[0].style == "idempotent" && len(recs) != 2 {
			v.add("idempotent duplicates that got different calls", fmt.Sprintf("%s: %d callers", desc, len(recs)))
		}
	}
	return v
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
