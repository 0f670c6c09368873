package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// turns keeps each turn's state (the agent it belongs to, the tools it
// discovered and activated, its intake) and the calls filed under it, in
// the turns bucket.
type turns struct {
	store kvStore
}

// turnRecord is a turn's saved state with the revision it was read at.
type turnRecord struct {
	state    messages.TurnState
	revision uint64
}

// claim binds the turn to an agent: a turn belongs to the first agent that
// names it, and another agent cannot use it.
func (t *turnRecord) claim(agent string) error {
	if agent == "" {
		return nil
	}
	if t.state.Agent == "" {
		t.state.Agent = agent
		return nil
	}
	if t.state.Agent != agent {
		return messages.Errorf(messages.CodeConflict, "turn %s belongs to agent %q, not %q", t.state.Turn, t.state.Agent, agent)
	}
	return nil
}

// prune removes vanished tools from the turn's saved selections.
func (t *turnRecord) prune(dropped []string) bool {
	if len(dropped) == 0 {
		return false
	}
	gone := func(name string) bool { return slices.Contains(dropped, name) }
	before := len(t.state.Discovered) + len(t.state.Activated)
	t.state.Discovered = slices.DeleteFunc(t.state.Discovered, gone)
	t.state.Activated = slices.DeleteFunc(t.state.Activated, gone)
	if t.state.Intake != nil {
		t.state.Intake.Tools = slices.DeleteFunc(t.state.Intake.Tools, gone)
	}
	return before != len(t.state.Discovered)+len(t.state.Activated)
}

// errTurnChanged is what save returns when another request wrote the turn
// since it was read; the caller reads it again and retries.
var errTurnChanged = errors.New("turn changed concurrently")

// turnAttempts bounds the attempts of a request whose turn keeps changing.
const turnAttempts = 11

// turnKeptChanging is the error of a request that ran out of retries.
func turnKeptChanging(turn string) error {
	return messages.Errorf(messages.CodeConflict, "turn %s kept changing; try again", turn)
}

// load reads a turn; a turn never saved is empty, at revision 0.
func (ts *turns) load(ctx context.Context, turn string) (*turnRecord, error) {
	key, err := messages.TurnStateKey(turn)
	if err != nil {
		return nil, err
	}
	value, revision, err := ts.store.Get(ctx, key)
	if errors.Is(err, errNoKey) {
		return &turnRecord{state: messages.TurnState{Turn: turn}}, nil
	}
	if err != nil {
		return nil, unavailable(err, "read turn %s", turn)
	}
	rec := &turnRecord{revision: revision}
	if err := json.Unmarshal(value, &rec.state); err != nil {
		return nil, messages.Errorf(messages.CodeInternal, "turn %s is unreadable: %v", turn, err)
	}
	return rec, nil
}

// save writes the turn if nobody else did since it was read, and returns
// errTurnChanged otherwise.
func (ts *turns) save(ctx context.Context, t *turnRecord) error {
	key, err := messages.TurnStateKey(t.state.Turn)
	if err != nil {
		return err
	}
	t.state.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(&t.state)
	if err != nil {
		return err
	}
	if t.revision == 0 {
		_, err = ts.store.Create(ctx, key, data)
	} else {
		_, err = ts.store.Update(ctx, key, data, t.revision)
	}
	if errors.Is(err, errKeyExists) || errors.Is(err, errStale) {
		return errTurnChanged
	}
	return unavailable(err, "save turn %s", t.state.Turn)
}

// update reads the turn, claims it for agent, applies change and saves
// it, again from the start if another request wrote it meanwhile.
func (ts *turns) update(ctx context.Context, turn, agent string, change func(*turnRecord) error) (*turnRecord, error) {
	for range turnAttempts {
		t, err := ts.load(ctx, turn)
		if err != nil {
			return nil, err
		}
		if err := t.claim(agent); err != nil {
			return nil, err
		}
		if err := change(t); err != nil {
			return nil, err
		}
		err = ts.save(ctx, t)
		if errors.Is(err, errTurnChanged) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, turnKeptChanging(turn)
}

// addDiscovered records a returned discovery page with the turn.
func (ts *turns) addDiscovered(ctx context.Context, turn, agent string, names []string) error {
	_, err := ts.update(ctx, turn, agent, func(t *turnRecord) error {
		for _, n := range names {
			if !slices.Contains(t.state.Discovered, n) {
				t.state.Discovered = append(t.state.Discovered, n)
			}
		}
		return nil
	})
	return err
}

// fileCall records that the call belongs to its turn. The write is the
// same however often it is retried.
func (ts *turns) fileCall(ctx context.Context, call *messages.CallRequest) error {
	if call.Turn == "" {
		return nil
	}
	key, err := messages.TurnCallKey(call.Turn, call.CallID)
	if err != nil {
		return err
	}
	rec, err := json.Marshal(messages.TurnCallRecord{CallID: call.CallID, Tool: call.Tool, QueuedAt: call.QueuedAt})
	if err != nil {
		return err
	}
	_, err = ts.store.Put(ctx, key, rec)
	return unavailable(err, "file call %s under turn %s", call.CallID, call.Turn)
}

// callIDs lists the IDs of the calls filed under a turn.
func (ts *turns) callIDs(ctx context.Context, turn string) ([]string, error) {
	filter, err := messages.TurnCallsFilter(turn)
	if err != nil {
		return nil, err
	}
	keys, err := ts.store.Keys(ctx, filter)
	if err != nil {
		return nil, unavailable(err, "list calls of turn %s", turn)
	}
	ids := make([]string, 0, len(keys))
	for _, key := range keys {
		ids = append(ids, key[strings.LastIndexByte(key, '.')+1:])
	}
	return ids, nil
}
