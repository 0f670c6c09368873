package usage_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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
