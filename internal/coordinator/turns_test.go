package coordinator

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestTurnBelongsToTheFirstAgent(t *testing.T) {
	ts := &turns{store: newMemStore()}
	ctx := context.Background()
	if err := ts.addDiscovered(ctx, "turn-1", "a", []string{"t-echo"}); err != nil {
		t.Fatal(err)
	}
	if err := ts.addDiscovered(ctx, "turn-1", "b", []string{"t-other"}); !errors.Is(err, messages.ErrConflict) {
		t.Errorf("another agent used the turn: %v", err)
	}
	if err := ts.addDiscovered(ctx, "turn-1", "", []string{"t-echo", "t-more"}); err != nil {
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
	if err := ts.addDiscovered(ctx, "turn-1", "a", []string{"t-one"}); err != nil {
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
	if err := ts.addDiscovered(ctx, "turn-1", "a", []string{"t-two"}); err != nil {
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
	if err := ts.addDiscovered(ctx, "turn-1", "a", []string{"t-three"}); !errors.Is(err, messages.ErrConflict) {
		t.Errorf("err = %v, want a conflict", err)
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

func TestCallsFiledUnderTheirTurn(t *testing.T) {
	ts := &turns{store: newMemStore()}
	ctx := context.Background()
	for _, id := range []string{"c1", "c2"} {
		if err := ts.fileCall(ctx, &messages.CallRequest{CallID: id, Tool: "t-echo", Turn: "turn-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.fileCall(ctx, &messages.CallRequest{CallID: "c3", Tool: "t-echo", Turn: "turn-2"}); err != nil {
		t.Fatal(err)
	}
	ids, err := ts.callIDs(ctx, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"c1", "c2"}) {
		t.Errorf("calls of turn-1: %v", ids)
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
