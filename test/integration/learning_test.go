package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/indexer"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
	"github.com/toolbus/toolbus/pkg/worker"
)

// learningTools are a small catalog with a vocabulary gap: "show me a
// picture" finds the file editor (it shows lines), not the image viewer.
func learningTools() []worker.Tool {
	type pathArgs struct {
		Path string `json:"path,omitempty"`
	}
	ok := func(ctx context.Context, in pathArgs) (string, error) { return "done", nil }
	return []worker.Tool{
		worker.Func("edit_file", "Edit a file: show the lines around a change and write it back.", ok),
		worker.Func("view_image", "Displays an image file (PNG, JPEG) to the user.", ok),
		worker.Func("delete_file", "Delete a file from the workspace.", ok),
		worker.Func("forecast", "Weather forecast for a city for the next days.", ok),
		worker.Func("broken_viewer", "Displays a picture, when it works.", func(ctx context.Context, in pathArgs) (string, error) {
			return "", errors.New("cannot decode the file")
		}),
		worker.Func("slow_marker", "A marker that takes a moment.", func(ctx context.Context, in pathArgs) (string, error) {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
			}
			return "marked", nil
		}),
		worker.Func("hold", "Waits until cancelled.", func(ctx context.Context, in pathArgs) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}),
	}
}

// usageBucket returns the usage bucket, which the coordinator created.
func usageBucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(testenv.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(testenv.Context(t), names.UsageBucket())
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// evidenceOf waits until the agent's evidence for tool is there and
// check accepts it, change by change of the bucket.
func evidenceOf(t *testing.T, kv jetstream.KeyValue, tool, agent string, check func(search.UsageRecord) bool) search.UsageRecord {
	t.Helper()
	key := usage.EvidenceKey(messages.ToolName{Namespace: strings.Split(tool, "-")[0], Method: strings.SplitN(tool, "-", 2)[1]}, agent)
	w, err := kv.Watch(testenv.Context(t), key)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		e := receive(t, w.Updates(), "evidence of "+agent+" for "+tool)
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var rec search.UsageRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		if check == nil || check(rec) {
			return rec
		}
	}
}

// noEvidence fails if the agent has evidence for tool.
func noEvidence(t *testing.T, kv jetstream.KeyValue, tool, agent, why string) {
	t.Helper()
	name, err := messages.ParseToolName(tool)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(testenv.Context(t), usage.EvidenceKey(name, agent)); err == nil {
		t.Errorf("%s: evidence recorded for %s: %s", why, tool, e.Value())
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
}

type learningEnv struct {
	url   string
	kv    jetstream.KeyValue
	agent func(name string) *client.Client
}

func startLearningEnv(t *testing.T, mutate func(*coordinator.Config)) *learningEnv {
	t.Helper()
	srv := testenv.Server(t)
	if mutate == nil {
		mutate = func(*coordinator.Config) {}
	}
	testenv.Coordinator(t, srv.URL(), mutate)
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "media", Tools: learningTools()})
	env := &learningEnv{url: srv.URL(), kv: usageBucket(t, srv.URL())}
	env.agent = func(name string) *client.Client { return testenv.Client(t, srv.URL(), client.Options{Agent: name}) }
	// The worker's tools are in the coordinator's index.
	c := env.agent("setup")
	testenv.Eventually(t, "the tools to be discoverable", func() bool {
		r, err := c.Discover(testenv.Context(t), messages.DiscoverRequest{Query: "image"})
		return err == nil && len(r.Hits) > 0
	})
	return env
}

// turn searches each query in a new turn of the agent, then calls tool
// in it, and returns the turn and the call's result.
func (e *learningEnv) turn(t *testing.T, c *client.Client, id string, tool string, queries ...string) *messages.CallResult {
	t.Helper()
	ctx := testenv.Context(t)
	for _, q := range queries {
		if _, err := c.Discover(ctx, messages.DiscoverRequest{Query: q, Turn: id}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Call(ctx, tool, map[string]string{"path": "/tmp/x.png"}, client.WithTurn(id))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestUsageEvidence: a call of a tool that a search of its turn found is
// recorded, after its result, as the agent's evidence for the tool: the
// normalised terms of the turn's queries up to that search, weighed by
// the call's outcome, a turn counting once however often it calls the
// tool. Calls no search of their turn found, calls outside turns, and
// cancelled calls are no evidence.
func TestUsageEvidence(t *testing.T) {
	t.Parallel()
	env := startLearningEnv(t, nil)
	ctx := testenv.Context(t)
	alice := env.agent("alice")

	// The first search misses the viewer; the second finds it: both
	// queries are evidence.
	if r, err := alice.Discover(ctx, messages.DiscoverRequest{Query: "show me a picture", Turn: "t1"}); err != nil || slices.Contains(discovered(r), "media-view_image") && discovered(r)[0] == "media-view_image" {
		t.Fatalf("the vocabulary gap this test needs is not there: %v %v", discovered(r), err)
	}
	res := env.turn(t, alice, "t1", "media-view_image", "image viewer")
	if res.Status != messages.StateCompleted {
		t.Fatalf("call: %+v", res)
	}
	rec := evidenceOf(t, env.kv, "media-view_image", "alice", nil)
	for _, term := range []string{"show", "pictur", "imag", "viewer"} {
		if rec.Terms[term] != 1 {
			t.Errorf("term %q weighs %v; want 1 (record %+v)", term, rec.Terms[term], rec)
		}
	}
	if rec.Turns != 1 || rec.User != "" {
		t.Errorf("record %+v; want one turn, no user (no identities)", rec)
	}

	// The same tool again in the same turn counts nothing more; the slow
	// marker's evidence comes after that call was looked at.
	if _, err := alice.Call(ctx, "media-view_image", map[string]string{}, client.WithTurn("t1")); err != nil {
		t.Fatal(err)
	}
	env.turn(t, alice, "t-marker-1", "media-slow_marker", "marker")
	evidenceOf(t, env.kv, "media-slow_marker", "alice", nil)
	if got := evidenceOf(t, env.kv, "media-view_image", "alice", nil); got.Turns != 1 {
		t.Errorf("a turn that called the tool twice counts %v turns", got.Turns)
	}

	// A tool error is weaker evidence.
	env.turn(t, alice, "t2", "media-broken_viewer", "picture that works")
	if got := evidenceOf(t, env.kv, "media-broken_viewer", "alice", nil); got.Turns != 0.5 || got.Terms["pictur"] != 0.5 {
		t.Errorf("a tool error's evidence %+v; want weight 0.5", got)
	}

	// No search of the turn found the tool; a call outside any turn; a
	// search that found the forecast, then a call of the file deleter.
	if _, err := alice.Call(ctx, "media-edit_file", map[string]string{}, client.WithTurn("t3")); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Call(ctx, "media-edit_file", map[string]string{}); err != nil {
		t.Fatal(err)
	}
	if r, err := alice.Discover(ctx, messages.DiscoverRequest{Query: "weather forecast", Turn: "t4", PageSize: 1}); err != nil || !slices.Equal(discovered(r), []string{"media-forecast"}) {
		t.Fatalf("forecast page %v %v", discovered(r), err)
	}
	if _, err := alice.Call(ctx, "media-delete_file", map[string]string{}, client.WithTurn("t4")); err != nil {
		t.Fatal(err)
	}
	// A call cancelled while it runs.
	if _, err := alice.Discover(ctx, messages.DiscoverRequest{Query: "waits until cancelled", Turn: "t5"}); err != nil {
		t.Fatal(err)
	}
	held, err := alice.Submit(ctx, messages.SubmitRequest{Tool: "media-hold", Arguments: messages.JSON(`{}`), Turn: "t5"})
	if err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, alice, held.CallID, messages.EventStarted)
	if _, err := alice.Cancel(ctx, held.CallID, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	if res, err := alice.Wait(ctx, held.CallID); err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("cancelled call %+v %v", res, err)
	}
	env.turn(t, alice, "t-marker-2", "media-slow_marker", "another marker")
	evidenceOf(t, env.kv, "media-slow_marker", "alice", func(r search.UsageRecord) bool { return r.Turns > 1.99 })
	noEvidence(t, env.kv, "media-edit_file", "alice", "calls that no search of their turn found")
	noEvidence(t, env.kv, "media-delete_file", "alice", "a call of a tool the turn's search did not return")
	noEvidence(t, env.kv, "media-hold", "alice", "a cancelled call")
}

// recordTime matches a time as a usage record holds it (RFC 3339, in JSON).
var recordTime = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"`)

// TestUsageEvidenceKeepsNoQueryOrArgument: the usage bucket holds the
// normalised terms of queries, without their numbers, and nothing of the
// calls' arguments.
func TestUsageEvidenceKeepsNoQueryOrArgument(t *testing.T) {
	t.Parallel()
	env := startLearningEnv(t, nil)
	ctx := testenv.Context(t)
	bob := env.agent("bob")
	query := "Show the scan of invoice ACME-4471 for alice@example.com, dated 1997-03-01"
	if _, err := bob.Discover(ctx, messages.DiscoverRequest{Query: query, Turn: "t1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Discover(ctx, messages.DiscoverRequest{Query: "image viewer", Turn: "t1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Call(ctx, "media-view_image", map[string]string{"path": "/home/bob/hunter2-passport.png"}, client.WithTurn("t1")); err != nil {
		t.Fatal(err)
	}
	rec := evidenceOf(t, env.kv, "media-view_image", "bob", nil)
	if rec.Terms["invoic"] == 0 || rec.Terms["scan"] == 0 {
		t.Fatalf("record %+v lacks the query's terms", rec)
	}
	keys, err := env.kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for key := range keys.Keys() {
		e, err := env.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		n++
		// A key's digests (of an agent, a user or a turn) are hex, which
		// may spell a number of the query by chance: they are checked for
		// being digests, not for the secrets.
		words := strings.Split(key, ".")
		for i, w := range words {
			if len(w) >= 32 && strings.Trim(w, "0123456789abcdef") == "" {
				words[i] = "<digest>"
			}
		}
		named := strings.Join(words, ".")
		// So are the times a record holds, whose digits may too.
		value := recordTime.ReplaceAllString(string(e.Value()), `"<time>"`)
		for _, secret := range []string{"4471", "ACME", "example.com", "1997", "hunter2", "passport", "/home", query, "bob", "alice@", "t1"} {
			if strings.Contains(named, secret) || strings.Contains(value, secret) {
				t.Errorf("usage key %s holds %q: %s", key, secret, e.Value())
			}
		}
	}
	if n < 2 {
		t.Fatalf("%d usage keys: the turn's and the evidence were expected", n)
	}
}

// TestLearningSwitchAndReset: learning.disable stops the recording (and
// learning.enable resumes it); learning.reset forgets a tool's evidence,
// and learning.status reports it all.
func TestLearningSwitchAndReset(t *testing.T) {
	t.Parallel()
	env := startLearningEnv(t, nil)
	ctx := testenv.Context(t)
	op, carol := env.agent("ops"), env.agent("carol")
	env.turn(t, carol, "t1", "media-view_image", "show me a picture", "image viewer")
	evidenceOf(t, env.kv, "media-view_image", "carol", nil)

	if _, err := op.Operator().SetLearning(ctx, false, ""); messages.CodeOf(err) != messages.CodeBadRequest {
		t.Fatalf("switching off without a reason: %v", err)
	}
	st, err := op.Operator().SetLearning(ctx, false, "an audit of what is kept")
	if err != nil || st.Enabled || !st.Recording || st.Reason != "an audit of what is kept" || st.Tools != 1 || st.Records != 1 {
		t.Fatalf("switched off: %+v %v", st, err)
	}
	env.turn(t, carol, "t2", "media-forecast", "weather forecast")
	if _, err := op.Operator().SetLearning(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	env.turn(t, carol, "t3", "media-slow_marker", "marker")
	evidenceOf(t, env.kv, "media-slow_marker", "carol", nil)
	noEvidence(t, env.kv, "media-forecast", "carol", "a call while learning was off")

	st, err = op.Operator().LearningStatus(ctx, "media:view_image")
	if err != nil || !st.Enabled || st.Tool == nil || st.Tool.Tool != "media-view_image" || st.Tool.Agents != 1 || st.Tool.Turns != 1 {
		t.Fatalf("status of view_image: %+v %v", st, err)
	}
	if !slices.ContainsFunc(st.Tool.Learned, func(lt messages.LearnedTerm) bool { return lt.Term == "pictur" && lt.Count > 0 }) {
		t.Errorf("learned %+v; want pictur", st.Tool.Learned)
	}
	if _, err := op.Operator().ResetLearning(ctx, "media-nope!"); messages.CodeOf(err) != messages.CodeInvalidName {
		t.Errorf("reset of a bad name: %v", err)
	}
	reply, err := op.Operator().ResetLearning(ctx, "media-view_image")
	if err != nil || reply.Deleted != 1 {
		t.Fatalf("reset: %+v %v", reply, err)
	}
	noEvidence(t, env.kv, "media-view_image", "carol", "after a reset")
	if st, err := op.Operator().LearningStatus(ctx, "media-view_image"); err != nil || st.Tool.Agents != 0 || len(st.Tool.Learned) != 0 || st.Records != 1 {
		t.Errorf("status after the reset: %+v %v", st, err)
	}
	// Evidence comes back with new use, on the record the reset deleted.
	env.turn(t, carol, "t4", "media-view_image", "image viewer")
	if got := evidenceOf(t, env.kv, "media-view_image", "carol", nil); got.Turns != 1 || got.Terms["show"] != 0 {
		t.Errorf("evidence after the reset %+v; want only the new turn", got)
	}
	if reply, err := op.Operator().ResetLearning(ctx, ""); err != nil || reply.Deleted != 2 {
		t.Fatalf("reset of all: %+v %v", reply, err)
	}
}

// TestNoLearningRecordsNothing: a coordinator started with NoLearning
// records nothing, whatever the switch.
func TestNoLearningRecordsNothing(t *testing.T) {
	t.Parallel()
	env := startLearningEnv(t, func(c *coordinator.Config) { c.NoLearning = true })
	ctx := testenv.Context(t)
	dave := env.agent("dave")
	env.turn(t, dave, "t1", "media-view_image", "image viewer")
	st, err := dave.Operator().LearningStatus(ctx, "")
	if err != nil || st.Recording || !st.Enabled {
		t.Fatalf("status %+v %v", st, err)
	}
	keys, err := env.kv.ListKeys(ctx)
	if err == nil {
		for key := range keys.Keys() {
			t.Errorf("usage key %s written by a coordinator that does not learn", key)
		}
	} else if !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatal(err)
	}
}

// TestDiscoveryLearnsFromUse: agents that found the image viewer only by
// searching again, after "show me a picture" failed them, teach discovery
// that words: the indexer folds their evidence into the viewer's learned
// field and the next agent's "show me a picture" finds it first. One
// agent's thousand turns do not outweigh the definitions of the tools
// others search, and switching learning off takes the learned fields away.
func TestDiscoveryLearnsFromUse(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "media", Tools: learningTools()})
	startIndexer(t, srv.URL(), func(c *indexer.Config) { c.LearnInterval = 20 * time.Millisecond })
	ctx := testenv.Context(t)
	kv := usageBucket(t, srv.URL())
	newAgent := func(name string) *client.Client { return testenv.Client(t, srv.URL(), client.Options{Agent: name}) }
	first := func(c *client.Client, query string) string {
		r, err := c.Discover(ctx, messages.DiscoverRequest{Query: query})
		if err != nil || len(r.Hits) == 0 {
			return ""
		}
		return r.Hits[0].Name
	}
	newcomer := newAgent("newcomer")
	testenv.Eventually(t, "the tools in the index", func() bool { return first(newcomer, "image viewer") == "media-view_image" })
	if got := first(newcomer, "show me a picture"); got == "media-view_image" {
		t.Fatalf("show me a picture finds %s before any use: the test shows nothing", got)
	}
	env := &learningEnv{url: srv.URL(), kv: kv}
	for i := range 3 {
		name := fmt.Sprint("viewer-", i)
		env.turn(t, newAgent(name), "turn-"+name, "media-view_image", "show me a picture", "image viewer")
		evidenceOf(t, kv, "media-view_image", name, nil)
	}
	testenv.Eventually(t, "show me a picture to find the viewer first", func() bool { return first(newcomer, "show me a picture") == "media-view_image" })

	// Mallory searches for the forecast and calls the file deleter, again
	// and again: its evidence is one agent's, capped at one unit a term,
	// and what it costs the deleter where the other agents look for it
	// (a query none of Mallory's words reach) is at most an eleventh of
	// its score.
	scoreOf := func(query, tool string) float64 {
		r, err := newcomer.Discover(ctx, messages.DiscoverRequest{Query: query})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range r.Hits {
			if h.Name == tool {
				return h.Score
			}
		}
		return 0
	}
	before := scoreOf("delete the file", "media-delete_file")
	if before == 0 {
		t.Fatal("delete the file does not find the deleter: the test shows nothing")
	}
	mallory := newAgent("mallory")
	for i := range 30 {
		env.turn(t, mallory, fmt.Sprint("m", i), "media-delete_file", "weather forecast delete file")
	}
	evidenceOf(t, kv, "media-delete_file", "mallory", func(r search.UsageRecord) bool { return r.Turns > 29.99 })
	st, err := newcomer.Operator().LearningStatus(ctx, "media-delete_file")
	if err != nil {
		t.Fatal(err)
	}
	unit := search.DefaultLearnConfig().UnitCount
	for _, lt := range st.Tool.Learned {
		if float64(lt.Count) > unit {
			t.Errorf("one agent's 30 turns made %q count %d; at most one unit, %v", lt.Term, lt.Count, unit)
		}
	}
	if got := first(newcomer, "weather forecast"); got != "media-forecast" {
		t.Errorf("weather forecast finds %s first after one agent's campaign", got)
	}
	var after float64
	testenv.Eventually(t, "the campaign to reach the index", func() bool {
		after = scoreOf("delete the file", "media-delete_file")
		return after != before
	})
	if least := before / 1.1; after < least*(1-1e-5) || after >= before {
		t.Errorf("one agent's campaign took the deleter's score for delete the file from %v to %v; want at least %v", before, after, least)
	}
	if got := first(newcomer, "delete the file"); got != "media-delete_file" {
		t.Errorf("delete the file finds %s first after one agent's campaign", got)
	}

	// Switched off, the learned fields go.
	if _, err := newcomer.Operator().SetLearning(ctx, false, "a test"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the learned fields to go", func() bool { return first(newcomer, "show me a picture") != "media-view_image" })
}

// TestUsageEvidenceNamesTheUser: with identities, each record names, as a
// token, the user whose agent made it, which caps what one user's agents
// add together.
func TestUsageEvidenceNamesTheUser(t *testing.T) {
	t.Parallel()
	srv, as := identityDeploy(t)
	testenv.Worker(t, srv.URL(), worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: "demo", Tools: []worker.Tool{
		worker.Func("view_image", "Displays an image file to the user.", echoTool),
	}})
	ctx := testenv.Context(t)
	c := agentClient(t, as("agent_a"), "support-bot")
	testenv.Eventually(t, "the viewer to be discoverable", func() bool {
		r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "image"})
		return err == nil && len(r.Hits) > 0
	})
	if _, err := c.Discover(ctx, messages.DiscoverRequest{Query: "image file", Turn: "t-user"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, "demo-view_image", map[string]string{}, client.WithTurn("t-user")); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(as("coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, names.UsageBucket())
	if err != nil {
		t.Fatal(err)
	}
	rec := evidenceOf(t, kv, "demo-view_image", "support-bot", nil)
	if want := usage.Token("user", "AGENTS/agent_a"); rec.User != want {
		t.Errorf("record's user %q; want the token of AGENTS/agent_a, %q", rec.User, want)
	}
}
