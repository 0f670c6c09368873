package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

func TestTurnBelongsToTheFirstAgent(t *testing.T) {
	ts := &turns{store: newMemStore()}
	ctx := context.Background()
	if err := ts.addDiscovered(ctx, nil, "turn-1", "a", []string{"t-echo"}); err != nil {
		t.Fatal(err)
	}
	if err := ts.addDiscovered(ctx, nil, "turn-1", "b", []string{"t-other"}); !errors.Is(err, messages.ErrConflict) {
		t.Errorf("another agent used the turn: %v", err)
	}
	if err := ts.addDiscovered(ctx, nil, "turn-1", "", []string{"t-echo", "t-more"}); err != nil {
		t.Fatal(err)
	}
	rec, err := ts.load(ctx, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.state.Agent != "a" || !slices.Equal(rec.state.Discovered, []string{"t-echo", "t-more"}) {
		t.Errorf("turn = %+v", rec.state)
	}
}

func TestTurnUpdateRetriesWhenTheTurnChanged(t *testing.T) {
	store := newMemStore()
	ts := &turns{store: store}
	ctx := context.Background()
	if err := ts.addDiscovered(ctx, nil, "turn-1", "a", []string{"t-one"}); err != nil {
		t.Fatal(err)
	}
	writes := 0
	// Another request writes the turn between each read and write, twice.
	store.beforeUpdate = func(key string) {
		if writes++; writes <= 2 {
			v, _, _ := store.Get(ctx, key)
			_, _ = store.Put(ctx, key, v)
		}
	}
	if err := ts.addDiscovered(ctx, nil, "turn-1", "a", []string{"t-two"}); err != nil {
		t.Fatal(err)
	}
	if writes != 3 {
		t.Errorf("%d attempts, want 3", writes)
	}
	// A turn that never stops changing is a conflict, not a loop.
	store.beforeUpdate = func(key string) {
		v, _, _ := store.Get(ctx, key)
		_, _ = store.Put(ctx, key, v)
	}
	if err := ts.addDiscovered(ctx, nil, "turn-1", "a", []string{"t-three"}); !errors.Is(err, messages.ErrConflict) {
		t.Errorf("err = %v, want a conflict", err)
	}
}

// A page that adds no tool to a saved turn writes nothing; one that adds a
// tool, or a first page that only claims the turn, is written. A record the
// request read before another request wrote the turn is read again.
func TestTurnIsWrittenOnlyWhenAPageChangesIt(t *testing.T) {
	store := newMemStore()
	ts := &turns{store: store}
	ctx := context.Background()
	if err := ts.addDiscovered(ctx, nil, "turn-1", "a", nil); err != nil {
		t.Fatal(err)
	}
	if store.last != 1 {
		t.Fatalf("%d writes for the page that claimed a new turn, want 1", store.last)
	}
	if err := ts.addDiscovered(ctx, nil, "turn-1", "a", []string{"t-one"}); err != nil {
		t.Fatal(err)
	}
	read, err := ts.load(ctx, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range [][]string{{"t-one"}, nil} {
		if err := ts.addDiscovered(ctx, read, "turn-1", "a", page); err != nil {
			t.Fatal(err)
		}
		if err := ts.addDiscovered(ctx, nil, "turn-1", "a", page); err != nil {
			t.Fatal(err)
		}
	}
	if store.last != 2 {
		t.Errorf("%d writes after pages that added nothing, want 2", store.last)
	}
	// Another request adds a tool after this one read the turn: this one's
	// page is saved onto the turn read again, and both tools stay.
	stale := *read
	stale.state.Discovered = slices.Clone(read.state.Discovered)
	if err := ts.addDiscovered(ctx, nil, "turn-1", "a", []string{"t-two"}); err != nil {
		t.Fatal(err)
	}
	if err := ts.addDiscovered(ctx, &stale, "turn-1", "a", []string{"t-three"}); err != nil {
		t.Fatal(err)
	}
	rec, err := ts.load(ctx, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.state.Discovered, []string{"t-one", "t-two", "t-three"}) {
		t.Errorf("discovered %v, want t-one, t-two and t-three", rec.state.Discovered)
	}
	// The turn's owner is checked on the record read, too.
	if err := ts.addDiscovered(ctx, rec, "turn-1", "b", []string{"t-four"}); !errors.Is(err, messages.ErrConflict) {
		t.Errorf("another agent's page on a record read: %v", err)
	}
}

func TestTurnPrune(t *testing.T) {
	rec := &turnRecord{state: messages.TurnState{Discovered: []string{"a", "b"}, Activated: []string{"b", "c"}, Intake: &messages.IntakeSelection{Tools: []string{"b", "d"}}}}
	if rec.prune(nil) {
		t.Error("nothing dropped, yet changed")
	}
	if !rec.prune([]string{"b"}) {
		t.Error("b dropped, yet unchanged")
	}
	if !slices.Equal(rec.state.Discovered, []string{"a"}) || !slices.Equal(rec.state.Activated, []string{"c"}) || !slices.Equal(rec.state.Intake.Tools, []string{"d"}) {
		t.Errorf("pruned turn = %+v", rec.state)
	}
}

// TestATurnsCallsAreFoundByTheirQueuedEvents: a turn's calls are the
// queued events that name it after the sequence its record holds, each
// once (a call held for an approval is
// queued again once approved); calls of other turns, of no turn and of
// the turn's name before it was saved are not its. A turn saved before
// version 3 lists the calls filed under it in the turns bucket.
func TestATurnsCallsAreFoundByTheirQueuedEvents(t *testing.T) {
	_, nc, js, names := jetStreamEnv(t)
	ctx := context.Background()
	l := ledger.New(nc, js, names)
	t.Cleanup(l.Close)
	queue := func(id, turn string) {
		t.Helper()
		msg, err := l.EventMsg("", "t", &messages.CallEvent{CallID: id, Kind: messages.EventQueued, Request: &messages.CallRequest{CallID: id, Tool: "t-echo", Namespace: "t", Method: "echo", Turn: turn}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	queue("before", "turn-1") // under the turn's name, before the turn was saved
	ts := &turns{store: newMemStore(), calls: l.Turns()}
	if err := ts.claimForCall(ctx, "turn-1", "agent-a"); err != nil {
		t.Fatal(err)
	}
	queue("c1", "turn-1")
	queue("other", "turn-2")
	queue("none", "")
	if _, err := l.Hold(ctx, &messages.CallRequest{CallID: "held", Tool: "t-echo", Namespace: "t", Method: "echo", Turn: "turn-1"}); err != nil {
		t.Fatal(err)
	}
	queue("c2", "turn-1")
	queue("held", "turn-1") // approved
	info, ids, err := ts.info(ctx, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(ids); info.State == nil || info.State.Agent != "agent-a" || !slices.Equal(ids, []string{"c1", "c2", "held"}) {
		t.Errorf("turn-1: state %+v, calls %v; want agent-a's, calls [c1 c2 held]", info.State, ids)
	}
	// A call without an agent saves its turn too, so its calls are found.
	if err := ts.claimForCall(ctx, "turn-3", ""); err != nil {
		t.Fatal(err)
	}
	queue("c3", "turn-3")
	if _, ids, err := ts.info(ctx, "turn-3"); err != nil || !slices.Equal(ids, []string{"c3"}) {
		t.Errorf("turn-3: calls %v (%v); want [c3]", ids, err)
	}
	if _, _, err := ts.info(ctx, "turn-4"); messages.CodeOf(err) != messages.CodeTurnNotFound {
		t.Errorf("a turn never saved: %v, want turn_not_found", err)
	}

	legacy := &turns{store: newMemStore(), calls: l.Turns()}
	if err := legacy.save(ctx, &turnRecord{state: messages.TurnState{Turn: "old", EventsSeq: 0}}); err != nil {
		t.Fatal(err)
	}
	// Saved with a sequence, as every turn is now: clear it, as a turn
	// saved before version 3 has none.
	rec, err := legacy.load(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	rec.state.EventsSeq = 0
	data, _ := json.Marshal(&rec.state)
	key, _ := messages.TurnStateKey("old")
	if _, err := legacy.store.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"f1", "f2"} {
		key, _ := messages.TurnCallKey("old", id)
		if _, err := legacy.store.Put(ctx, key, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	_, ids, err = legacy.info(ctx, "old")
	if slices.Sort(ids); err != nil || !slices.Equal(ids, []string{"f1", "f2"}) {
		t.Errorf("a turn of version 2: calls %v (%v); want those filed [f1 f2]", ids, err)
	}
}

func TestToolSwitchRequests(t *testing.T) {
	s := &toolSwitches{}
	for _, tc := range []struct {
		name    string
		req     messages.ToolSwitchRequest
		disable bool
	}{
		{"neither tool nor namespace", messages.ToolSwitchRequest{}, false},
		{"both tool and namespace", messages.ToolSwitchRequest{Tool: "t-echo", Namespace: "t"}, false},
		{"disable without a reason", messages.ToolSwitchRequest{Namespace: "t"}, true},
	} {
		_, err := s.set(context.Background(), &tc.req, tc.disable)
		if messages.CodeOf(err) != messages.CodeBadRequest {
			t.Errorf("%s: err = %v, want bad_request", tc.name, err)
		}
	}
}
