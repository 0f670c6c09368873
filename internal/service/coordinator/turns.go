package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

// turns keeps each turn's state (the agent it belongs to, the tools it
// discovered and activated, its intake) in the turns bucket, and finds
// its calls by their queued events, whose subjects name the turn.
type turns struct {
	store kvStore
	// calls reads the events stream; nil in tests of the state alone.
	calls turnCalls

	// owners remembers the agent each recently used turn belongs to, so
	// that checking a submit's turn costs a read only the first time. A
	// turn's agent never changes while the turn is kept.
	mu     sync.Mutex
	owners map[string]turnOwner
	// recorded holds turns known to have a record, of calls without an
	// agent (see record); bounded as owners are.
	recorded map[string]struct{}
}

// turnCalls is what turns read of the events stream: its last sequence,
// which a new turn records, and the calls queued in a turn since then.
type turnCalls interface {
	LastSeq(ctx context.Context) (uint64, error)
	TurnCalls(ctx context.Context, turn string, from uint64, max int) ([]string, error)
}

// retryingTurnCalls is turnCalls whose reads are retried while the events
// stream does not answer, at most wait each (see retryTransient).
type retryingTurnCalls struct {
	turnCalls
	wait time.Duration
}

func (r retryingTurnCalls) LastSeq(ctx context.Context) (seq uint64, err error) {
	err = retryTransient(ctx, r.wait, func(ctx context.Context) (err error) {
		seq, err = r.turnCalls.LastSeq(ctx)
		return err
	})
	return seq, err
}

func (r retryingTurnCalls) TurnCalls(ctx context.Context, turn string, from uint64, max int) (ids []string, err error) {
	err = retryTransient(ctx, r.wait, func(ctx context.Context) (err error) {
		ids, err = r.turnCalls.TurnCalls(ctx, turn, from, max)
		return err
	})
	return ids, err
}

// maxTurnCalls bounds the calls turns.get lists of one turn.
const maxTurnCalls = 10_000

// turnOwner is a remembered owner of a turn, with when it was read.
type turnOwner struct {
	agent string
	at    time.Time
}

// Bounds of the remembered owners: how many turns, and for how long
// (well within the turns bucket's TTL, after which a turn may be named
// anew by another agent).
const (
	maxTurnOwners = 16384
	turnOwnerTTL  = time.Hour
)

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
		// The owner is not named: it may be an agent the caller's user
		// does not serve, and the turn is none of its business.
		return messages.Errorf(messages.CodeConflict, "turn %s belongs to another agent than %q", t.state.Turn, agent)
	}
	return nil
}

// selects tells whether the turn selected the tool: discovered,
// activated, or named by its intake.
func (t *turnRecord) selects(name string) bool {
	return slices.Contains(t.state.Discovered, name) || slices.Contains(t.state.Activated, name) ||
		t.state.Intake != nil && slices.Contains(t.state.Intake.Tools, name)
}

// prune removes vanished tools from the turn's saved selections.
func (t *turnRecord) prune(dropped []string) bool {
	if len(dropped) == 0 {
		return false
	}
	gone := func(name string) bool { return slices.Contains(dropped, name) }
	selections := func() int {
		n := len(t.state.Discovered) + len(t.state.Activated)
		if t.state.Intake != nil {
			n += len(t.state.Intake.Tools)
		}
		return n
	}
	before := selections()
	t.state.Discovered = slices.DeleteFunc(t.state.Discovered, gone)
	t.state.Activated = slices.DeleteFunc(t.state.Activated, gone)
	if t.state.Intake != nil {
		t.state.Intake.Tools = slices.DeleteFunc(t.state.Intake.Tools, gone)
	}
	return before != selections()
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
	if t.revision == 0 && t.state.EventsSeq == 0 && ts.calls != nil {
		// Before the turn's first call is queued: its calls' queued
		// events come after this sequence.
		seq, err := ts.calls.LastSeq(ctx)
		if err != nil {
			return unavailable(err, "save turn %s", t.state.Turn)
		}
		t.state.EventsSeq = seq + 1
	}
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
	return ts.updateFrom(ctx, nil, turn, agent, change)
}

// errUnchanged is what a change returns when it leaves a saved turn as it
// was: the turn is not written again.
var errUnchanged = errors.New("turn unchanged")

// updateFrom is update, starting from a record of the turn the caller
// read (nil: none), which it may change; a write that finds the turn
// changed since reads it again.
func (ts *turns) updateFrom(ctx context.Context, read *turnRecord, turn, agent string, change func(*turnRecord) error) (*turnRecord, error) {
	for range turnAttempts {
		t := read
		read = nil
		if t == nil {
			var err error
			if t, err = ts.load(ctx, turn); err != nil {
				return nil, err
			}
		}
		claimed := t.state.Agent == "" && agent != ""
		if err := t.claim(agent); err != nil {
			return nil, err
		}
		err := change(t)
		switch {
		case errors.Is(err, errUnchanged) && t.revision != 0 && !claimed:
			if t.state.Agent != "" {
				ts.remember(turn, t.state.Agent)
			}
			return t, nil
		case errors.Is(err, errUnchanged):
		case err != nil:
			return nil, err
		}
		err = ts.save(ctx, t)
		if errors.Is(err, errTurnChanged) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if t.state.Agent != "" {
			ts.remember(turn, t.state.Agent)
		}
		return t, nil
	}
	return nil, turnKeptChanging(turn)
}

// addDiscovered records a returned discovery page with the turn, read is
// the turn's record as the request read it (nil: not read). A page that
// adds nothing to a saved turn writes nothing.
func (ts *turns) addDiscovered(ctx context.Context, read *turnRecord, turn, agent string, names []string) error {
	_, err := ts.updateFrom(ctx, read, turn, agent, func(t *turnRecord) error {
		added := false
		for _, n := range names {
			if !slices.Contains(t.state.Discovered, n) {
				t.state.Discovered = append(t.state.Discovered, n)
				added = true
			}
		}
		if !added {
			return errUnchanged
		}
		return nil
	})
	return err
}

// callIDs lists the IDs of the calls queued in a turn: those whose queued
// events name it, after the sequence its record holds; for a turn saved
// before version 3, those filed under it in the turns bucket.
func (ts *turns) callIDs(ctx context.Context, rec *turnRecord) ([]string, error) {
	turn := rec.state.Turn
	if rec.revision != 0 && rec.state.EventsSeq == 0 {
		return ts.filedCallIDs(ctx, turn)
	}
	if rec.revision == 0 || ts.calls == nil {
		return nil, nil
	}
	// The record's sequence is the first its calls may have.
	ids, err := ts.calls.TurnCalls(ctx, turn, rec.state.EventsSeq, maxTurnCalls)
	if err != nil {
		return nil, unavailable(err, "list calls of turn %s", turn)
	}
	return ids, nil
}

// filedCallIDs lists the IDs of the calls filed under a turn in the
// turns bucket, as versions before 3 filed them.
func (ts *turns) filedCallIDs(ctx context.Context, turn string) ([]string, error) {
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

// info is what turns.get answers of a turn before its calls are read: the
// turn's saved state, if it has one, and the IDs of its calls. A turn with
// neither does not exist.
func (ts *turns) info(ctx context.Context, turn string) (*messages.TurnInfo, []string, error) {
	rec, err := ts.load(ctx, turn)
	if err != nil {
		return nil, nil, err
	}
	ids, err := ts.callIDs(ctx, rec)
	if err != nil {
		return nil, nil, err
	}
	if rec.revision == 0 && len(ids) == 0 {
		return nil, nil, messages.Errorf(messages.CodeTurnNotFound, "no turn %s: it has neither saved state nor calls", turn)
	}
	out := &messages.TurnInfo{Turn: turn, Calls: []messages.CallInfo{}}
	if rec.revision != 0 {
		out.State = &rec.state
	}
	return out, ids, nil
}

// callInfo is a call as calls.get and turns.get report it. Its start is
// the time the worker began the attempt that wrote the result, when there
// is one (a call that ends within the worker's start delay has no started
// event), else that of the latest started event; and progress reported by
// an earlier attempt than the latest one that started is not shown as
// the call's.
func callInfo(snap *ledger.Snapshot) messages.CallInfo {
	info := snap.Info()
	if r := snap.Result; r != nil && r.Result != nil && !r.Result.StartedAt.IsZero() {
		info.StartedAt = r.Result.StartedAt
	}
	if p, st := snap.Progress, snap.Started; info.Progress != nil && p != nil && st != nil && p.Attempt < st.Attempt {
		info.Progress = nil
	}
	return info
}

// claimForCall checks that a call's agent may file it under its turn (a
// turn belongs to the first agent that names it, as in tools.list), and
// binds a turn that nobody named yet to the agent. A turn is saved before
// its first call is queued, with the sequence its calls' queued events
// come after. A call without an agent is not checked; a call without a
// turn has nothing to claim.
func (ts *turns) claimForCall(ctx context.Context, turn, agent string) error {
	if turn == "" {
		return nil
	}
	if agent == "" {
		return ts.record(ctx, turn)
	}
	if owner, ok := ts.owner(turn); ok {
		return (&turnRecord{state: messages.TurnState{Turn: turn, Agent: owner}}).claim(agent)
	}
	for range turnAttempts {
		t, err := ts.load(ctx, turn)
		if err != nil {
			return err
		}
		if t.state.Agent != "" {
			ts.remember(turn, t.state.Agent)
			return t.claim(agent)
		}
		t.state.Agent = agent
		err = ts.save(ctx, t)
		if errors.Is(err, errTurnChanged) {
			continue
		}
		if err != nil {
			return err
		}
		ts.remember(turn, agent)
		return nil
	}
	return turnKeptChanging(turn)
}

// record saves a turn that has no record yet, without an agent, so that
// its calls can be found (see claimForCall); once per turn and process.
func (ts *turns) record(ctx context.Context, turn string) error {
	ts.mu.Lock()
	_, known := ts.recorded[turn]
	ts.mu.Unlock()
	if known {
		return nil
	}
	if _, ok := ts.owner(turn); !ok {
		t, err := ts.load(ctx, turn)
		if err != nil {
			return err
		}
		if t.revision == 0 {
			// Another request may create it first: either way it exists.
			if err := ts.save(ctx, t); err != nil && !errors.Is(err, errTurnChanged) {
				return err
			}
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.recorded == nil || len(ts.recorded) >= maxTurnOwners {
		ts.recorded = make(map[string]struct{})
	}
	ts.recorded[turn] = struct{}{}
	return nil
}

func (ts *turns) owner(turn string) (string, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	o, ok := ts.owners[turn]
	if !ok || time.Since(o.at) > turnOwnerTTL {
		return "", false
	}
	return o.agent, true
}

func (ts *turns) remember(turn, agent string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.owners == nil || len(ts.owners) >= maxTurnOwners {
		ts.owners = make(map[string]turnOwner)
	}
	ts.owners[turn] = turnOwner{agent: agent, at: time.Now()}
}
