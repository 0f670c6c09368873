package usage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// recorderEnv is a recorder on a real usage bucket whose calls all
// complete, and which notes the calls whose results it was asked for:
// the calls it took for evidence.
type recorderEnv struct {
	url   string
	kv    jetstream.KeyValue
	rec   *usage.Recorder
	mu    sync.Mutex
	asked map[string]bool
}

func startRecorder(t *testing.T) *recorderEnv {
	t.Helper()
	srv := testenv.Server(t)
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(testenv.Context(t), jetstream.KeyValueConfig{Bucket: "usage_test", History: 1, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	env := startRecorderOn(t, js, kv)
	env.url = srv.URL()
	return env
}

// startRecorderOn starts a recorder on a bucket another may use too, as
// the coordinators of one installation share theirs.
func startRecorderOn(t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue) *recorderEnv {
	t.Helper()
	var err error
	env := &recorderEnv{kv: kv, asked: map[string]bool{}}
	env.rec, err = usage.NewRecorder(usage.RecorderConfig{Bucket: kv, JS: js, Logger: testenv.Logger(t),
		Outcome: func(ctx context.Context, call *messages.CallRequest) (*messages.CallResult, error) {
			env.mu.Lock()
			env.asked[call.CallID] = true
			env.mu.Unlock()
			return &messages.CallResult{CallID: call.CallID, Status: messages.StateCompleted}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.rec.Start(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.rec.Stop(context.Background()) })
	return env
}

// evidence waits for the agent's record for tool.
func (e *recorderEnv) evidence(t *testing.T, tool messages.ToolName, agent string) (search.UsageRecord, string) {
	t.Helper()
	w, err := e.kv.Watch(testenv.Context(t), usage.EvidenceKey(tool, agent))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case en := <-w.Updates():
			if en == nil || en.Operation() != jetstream.KeyValuePut {
				continue
			}
			var r search.UsageRecord
			if err := json.Unmarshal(en.Value(), &r); err != nil {
				t.Fatal(err)
			}
			return r, string(en.Value())
		case <-time.After(30 * time.Second):
			t.Fatalf("no evidence of %s for %s", agent, tool)
		}
	}
}

// stop stops the recorder, which waits for every call it took for
// evidence, and returns the calls whose results it asked for.
func (e *recorderEnv) stop(t *testing.T) map[string]bool {
	t.Helper()
	if err := e.rec.Stop(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.asked
}

// TestRecorderCountsOnlyItsTurnsFinds: a call is evidence only when a
// search of its own turn, by the turn's agent, returned its tool, and a
// turn counts once for a tool: another agent's call in the turn, a call
// of a tool no search of the turn returned and a second call of a tool
// are not even waited for. Of the query only its normalised terms
// without digits are kept, and nothing of the arguments.
func TestRecorderCountsOnlyItsTurnsFinds(t *testing.T) {
	t.Parallel()
	env := startRecorder(t)
	view := messages.ToolName{Namespace: "media", Method: "view_image"}
	edit := messages.ToolName{Namespace: "media", Method: "edit_file"}
	call := func(id, tool, agent string) *messages.CallRequest {
		return &messages.CallRequest{CallID: id, Tool: tool, Agent: agent, Turn: "t1", Arguments: messages.JSON(`{"path":"/home/alice/passport-4471.png"}`)}
	}
	env.rec.Searched("t1", "alice", "Show me the picture of invoice 4471", []string{view.String(), edit.String()})
	env.rec.Called(call("c-first", view.String(), "alice"), "")
	first, raw := env.evidence(t, view, "alice")
	if first.Turns != 1 || first.Terms["pictur"] != 1 || first.Terms["invoic"] != 1 {
		t.Fatalf("evidence %+v", first)
	}
	for _, secret := range []string{"4471", "passport", "/home", "Show me"} {
		if strings.Contains(raw, secret) {
			t.Errorf("the evidence holds %q: %s", secret, raw)
		}
	}

	env.rec.Called(call("c-again", view.String(), "alice"), "")
	env.rec.Called(call("c-bob", edit.String(), "bob"), "")
	env.rec.Called(call("c-unfound", "media-delete_file", "alice"), "")
	// The recorder takes calls in order: once the last one's evidence is
	// there, it has looked at the others.
	env.rec.Called(call("c-last", edit.String(), "alice"), "")
	env.evidence(t, edit, "alice")
	asked := env.stop(t)
	for id, why := range map[string]string{"c-again": "a second call of the tool in the turn", "c-bob": "another agent's call in the turn", "c-unfound": "a call of a tool no search of the turn returned"} {
		if asked[id] {
			t.Errorf("%s was taken for evidence", why)
		}
	}
	if !asked["c-first"] || !asked["c-last"] {
		t.Errorf("calls taken for evidence: %v", asked)
	}
	if _, err := env.kv.Get(testenv.Context(t), usage.EvidenceKey(edit, "bob")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("bob's evidence for the editor: %v, want none", err)
	}
	if again, _ := env.evidence(t, view, "alice"); again.Turns != 1 {
		t.Errorf("a turn that called the viewer twice counts %v turns", again.Turns)
	}
}

// TestRecorderReadsNoTurnRecordForATurnWithoutSearches: a call in a turn
// that no coordinator recorded a search of costs no read of the turn's
// record; one in a turn with a search does.
func TestRecorderReadsNoTurnRecordForATurnWithoutSearches(t *testing.T) {
	t.Parallel()
	env := startRecorder(t)
	view := messages.ToolName{Namespace: "media", Method: "view_image"}
	for i := range 50 {
		env.rec.Called(&messages.CallRequest{CallID: fmt.Sprintf("quiet-%d", i), Tool: view.String(), Agent: "alice", Turn: fmt.Sprintf("quiet-%d", i)}, "")
	}
	env.rec.Searched("t1", "alice", "show me the picture", []string{view.String()})
	env.rec.Called(&messages.CallRequest{CallID: "c1", Tool: view.String(), Agent: "alice", Turn: "t1"}, "")
	env.evidence(t, view, "alice")
	asked := env.stop(t)
	if n := env.rec.TurnReads(); n != 1 {
		t.Errorf("%d turn records read for 51 calls, one of them in a turn that searched; want 1", n)
	}
	if len(asked) != 1 || !asked["c1"] {
		t.Errorf("calls taken for evidence: %v", asked)
	}
}

// TestRecorderTakesACallInATurnAnotherCoordinatorSearched: a search
// recorded by one coordinator's recorder and a call made at once through
// another's are evidence: the second learns of the turn's search through
// its watch, and a call that comes before the watch says so is looked at
// again.
func TestRecorderTakesACallInATurnAnotherCoordinatorSearched(t *testing.T) {
	t.Parallel()
	first := startRecorder(t)
	js, err := jetstream.New(testenv.Connect(t, first.url))
	if err != nil {
		t.Fatal(err)
	}
	second := startRecorderOn(t, js, first.kv)
	view := messages.ToolName{Namespace: "media", Method: "view_image"}
	for i := range 20 {
		turn := fmt.Sprintf("t%d", i)
		agent := fmt.Sprintf("agent%d", i)
		first.rec.Searched(turn, agent, "show me the picture", []string{view.String()})
		// The search is stored before the call comes to the other.
		testenv.Eventually(t, "the turn's record", func() bool {
			_, err := first.kv.Get(testenv.Context(t), usage.TurnKey(turn))
			return err == nil
		})
		second.rec.Called(&messages.CallRequest{CallID: "c-" + turn, Tool: view.String(), Agent: agent, Turn: turn}, "")
		second.evidence(t, view, agent)
	}
}

// TestRecorderCreatesANewTurnsRecordUnread: the first search of a turn
// that no recorder has a record of creates the record without reading it;
// a second search of the turn through another coordinator's recorder,
// whether or not its watch has seen the first, reads the record and is
// added to it; another agent's search of the turn is not recorded.
func TestRecorderCreatesANewTurnsRecordUnread(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	ctx := testenv.Context(t)
	// Each recorder on a connection of its own, to tell their reads apart.
	connect := func() (jetstream.JetStream, jetstream.KeyValue, string) {
		nc := testenv.Connect(t, srv.URL())
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "usage_test", History: 1, LimitMarkerTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		inbox := nc.NewRespInbox()
		return js, kv, inbox[:strings.LastIndexByte(inbox, '.')+1]
	}
	js1, kv1, firstInbox := connect()
	js2, kv2, _ := connect()
	first, second := startRecorderOn(t, js1, kv1), startRecorderOn(t, js2, kv2)
	// Every read of a key by a recorder is a direct get on the server,
	// answered to its connection's inbox (the test waits for records
	// through a watch, which reads otherwise).
	var mu sync.Mutex
	firstReads, secondReads := 0, 0
	spyConn := testenv.Connect(t, srv.URL())
	if _, err := spyConn.Subscribe("$JS.API.DIRECT.GET.KV_usage_test.>", func(m *nats.Msg) {
		if !strings.Contains(m.Subject, "turns") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(m.Reply, firstInbox) {
			firstReads++
		} else {
			secondReads++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spyConn.Flush(); err != nil {
		t.Fatal(err)
	}
	record := func(turn string, searches int) usage.TurnRecord {
		t.Helper()
		w, err := kv1.Watch(ctx, usage.TurnKey(turn))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for {
			select {
			case e := <-w.Updates():
				var rec usage.TurnRecord
				if e != nil && json.Unmarshal(e.Value(), &rec) == nil && len(rec.Searches) >= searches {
					return rec
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("turn %s has no record of %d searches", turn, searches)
			}
		}
	}
	view := messages.ToolName{Namespace: "media", Method: "view_image"}
	const turns = 20
	for i := range turns {
		turn := fmt.Sprint("new-", i)
		first.rec.Searched(turn, "alice", "show me the picture", []string{view.String()})
		record(turn, 1)
		second.rec.Searched(turn, "bob", "bob's own query", []string{view.String()})
		second.rec.Searched(turn, "alice", "a photo please", []string{view.String()})
		if rec := record(turn, 2); rec.Agent != usage.Token("agent", "alice") || len(rec.Searches) != 2 {
			t.Fatalf("turn %s: %+v; want alice's two searches", turn, rec)
		}
	}
	first.stop(t)
	second.stop(t)
	mu.Lock()
	defer mu.Unlock()
	if firstReads != 0 {
		t.Errorf("the first recorder read the turns' records %d times to create them; want none", firstReads)
	}
	// Each of the second's searches found a record there: read, whether
	// its watch knew it or its create failed first.
	if secondReads < 2*turns {
		t.Errorf("the second recorder read the turns' records %d times for %d turns; want at least %d", secondReads, turns, 2*turns)
	}
}
