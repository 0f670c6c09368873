package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/search"
)

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	// Bucket is the usage bucket. Required.
	Bucket jetstream.KeyValue
	// JS writes the bucket's values with their TTLs. Required.
	JS jetstream.JetStream
	// Outcome waits for a call's result. Required.
	Outcome func(ctx context.Context, call *messages.CallRequest) (*messages.CallResult, error)
	// TurnWindow is how long a turn's searches are kept after its last
	// one: a call later than that in the turn is no evidence. Defaults to
	// DefaultTurnWindow.
	TurnWindow time.Duration
	// Retention is how long one agent's evidence for a tool is kept after
	// it last changed. Defaults to DefaultRetention.
	Retention time.Duration
	// OutcomeWait is how long a call's result is waited for: a call that
	// has none by then is no evidence. Defaults to DefaultOutcomeWait.
	OutcomeWait time.Duration
	// MaxWaiting bounds the calls whose results are waited for at once;
	// calls beyond it are no evidence. Defaults to DefaultMaxWaiting.
	MaxWaiting int
	// Queue bounds the searches and calls waiting to be recorded; beyond
	// it they are dropped. Defaults to 4096.
	Queue int
	// Learn weighs evidence. Defaults to search.DefaultLearnConfig().
	Learn search.LearnConfig
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Defaults of RecorderConfig.
const (
	DefaultTurnWindow  = time.Hour
	DefaultRetention   = 30 * 24 * time.Hour
	DefaultOutcomeWait = time.Hour
	DefaultMaxWaiting  = 1024
)

// Recorder records usage evidence for a coordinator: each search of a
// turn (Searched), and for each call of a tool that a search of the same
// turn returned (Called), once the call has its result, the evidence that
// the turn's queries up to that search ask for the tool, weighed by the
// result (OutcomeWeight). It works in the background, off the requests'
// paths, and drops what it cannot keep up with: evidence is a hint, never
// worth a slower call.
type Recorder struct {
	cfg RecorderConfig
	kv  jetstream.KeyValue
	log *slog.Logger

	disabled atomic.Bool
	jobs     chan job
	waiting  chan struct{}
	turns    *turnSet
	// turnReads counts the turn records read for calls.
	turnReads atomic.Int64

	searches, evidence, dropped atomic.Int64

	cancel context.CancelFunc
	bg     sync.WaitGroup
}

type job struct {
	// A search: turn, agent, terms and page; a call: call and user.
	turn, agent string
	terms       []string
	page        []string
	call        *messages.CallRequest
	user        string
	// at is when a call was put aside (Recorder.run), turnKey its
	// turn's record key.
	at      time.Time
	turnKey string
}

// NewRecorder returns a recorder; Start starts it.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Bucket == nil || cfg.JS == nil || cfg.Outcome == nil {
		return nil, errors.New("usage recorder: Bucket, JS and Outcome are required")
	}
	if cfg.TurnWindow <= 0 {
		cfg.TurnWindow = DefaultTurnWindow
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.OutcomeWait <= 0 {
		cfg.OutcomeWait = DefaultOutcomeWait
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Recorder{
		cfg:     cfg,
		kv:      cfg.Bucket,
		log:     cfg.Logger,
		jobs:    make(chan job, cfg.Queue),
		waiting: make(chan struct{}, cfg.MaxWaiting),
		turns:   newTurnSet(cfg.TurnWindow),
	}, nil
}

// Start reads the learning switch, follows it, and starts recording.
func (r *Recorder) Start(ctx context.Context) error {
	w, err := r.kv.Watch(ctx, SettingsKey)
	if err != nil {
		return fmt.Errorf("usage recorder: watch the learning switch: %w", err)
	}
	// The first update is the current switch, or nil when there is none.
	select {
	case e := <-w.Updates():
		r.apply(e)
	case <-ctx.Done():
		_ = w.Stop()
		return ctx.Err()
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	// The turn records' keys only: which turns have searches.
	turns, err := r.kv.Watch(ctx, turnsPrefix+">", jetstream.MetaOnly())
	if err != nil {
		cancel()
		_ = w.Stop()
		return fmt.Errorf("usage recorder: watch the turns' records: %w", err)
	}
	r.bg.Add(3)
	go r.followTurns(runCtx, turns)
	// Calls before the turns' records are all read cost a read each.
	select {
	case <-r.turns.readyCh:
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	go func() {
		defer r.bg.Done()
		defer w.Stop()
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				r.apply(e)
			case <-runCtx.Done():
				return
			}
		}
	}()
	go r.run(runCtx)
	return nil
}

// followTurns keeps the set of turns with searches until ctx ends or the
// watch stops, after which the set knows nothing.
func (r *Recorder) followTurns(ctx context.Context, w jetstream.KeyWatcher) {
	defer r.bg.Done()
	defer w.Stop()
	defer r.turns.setReady(false)
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			switch {
			case e == nil:
				// The records there were are all delivered.
				r.turns.setReady(true)
			case e.Operation() == jetstream.KeyValuePut:
				r.turns.searched(e.Key(), time.Now())
			default:
				r.turns.removed(e.Key())
			}
		case <-ctx.Done():
			return
		}
	}
}

// Stop stops recording; evidence waiting for a call's result is dropped.
func (r *Recorder) Stop(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	done := make(chan struct{})
	go func() { r.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Recorder) apply(e jetstream.KeyValueEntry) {
	if e == nil {
		return
	}
	var s Settings
	if e.Operation() == jetstream.KeyValuePut {
		if err := json.Unmarshal(e.Value(), &s); err != nil {
			r.log.Warn("usage: unreadable learning switch ignored", "error", err)
			return
		}
	}
	r.disabled.Store(s.Disabled)
}

// Enabled tells whether learning is on, as this recorder last saw the switch.
func (r *Recorder) Enabled() bool { return !r.disabled.Load() }

// SetEnabled changes what the recorder holds of the switch at once, as
// the coordinator that changed it knows before the switch's watch says so.
func (r *Recorder) SetEnabled(on bool) { r.disabled.Store(!on) }

// TurnReads counts the turn records read for calls: a call in a turn with
// no search known (none recorded by any coordinator within the turn
// window) is let go without one.
func (r *Recorder) TurnReads() int64 { return r.turnReads.Load() }

// Stats counts what the recorder did: the searches and the evidence it
// stored, and what it dropped (a full queue, too many calls waiting for
// their results, a write that failed).
func (r *Recorder) Stats() (searches, evidence, dropped int64) {
	return r.searches.Load(), r.evidence.Load(), r.dropped.Load()
}

// Searched records a search of a turn by an agent: the query's usage terms
// (search.UsageTerms) and the tools of the page it returned. A search
// outside a turn, or whose query keeps no term, is not recorded.
func (r *Recorder) Searched(turn, agent, query string, page []string) {
	if r == nil || turn == "" || !r.Enabled() {
		return
	}
	terms := search.UsageTerms(query)
	if len(terms) == 0 {
		return
	}
	r.enqueue(job{turn: turn, agent: agent, terms: terms, page: slices.Clone(page[:min(len(page), MaxPageTools)])})
}

// Called records, once it has its result, a call that the coordinator
// accepted (queued, or held for an approval), with the authenticated user
// that submitted it ("" without identities): evidence when a search of
// the call's turn, by the call's agent, returned the tool.
func (r *Recorder) Called(call *messages.CallRequest, user string) {
	if r == nil || call.Turn == "" || !r.Enabled() {
		return
	}
	r.enqueue(job{call: call, user: user})
}

func (r *Recorder) enqueue(j job) {
	select {
	case r.jobs <- j:
	default:
		r.dropped.Add(1)
	}
}

// turnLag is how long a call in a turn with no search known is kept
// before it is looked at again: the time another coordinator's search
// takes to reach this one's watch, with room to spare.
const turnLag = 250 * time.Millisecond

func (r *Recorder) run(ctx context.Context) {
	defer r.bg.Done()
	// later holds the calls whose turns had no search known when they
	// came, in the order they came, from head on, to be looked at again
	// after turnLag; they are looked at in groups, turnLag/4 apart.
	var later []job
	head := 0
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	for {
		select {
		case j := <-r.jobs:
			if j.call != nil {
				j.turnKey = TurnKey(j.call.Turn)
				if r.turns.without(j.turnKey, time.Now()) {
					if len(later)-head >= cap(r.jobs) {
						continue // a call in a turn that most likely searched nothing
					}
					j.at = time.Now()
					if later = append(later, j); len(later)-head == 1 {
						again.Reset(turnLag)
					}
					continue
				}
			}
			r.do(ctx, j)
		case <-again.C:
			now := time.Now()
			for head < len(later) && now.Sub(later[head].at) >= turnLag {
				if j := later[head]; !r.turns.without(j.turnKey, now) {
					r.do(ctx, j)
				}
				later[head] = job{}
				head++
			}
			if head == len(later) {
				later, head = later[:0], 0
				continue
			}
			if head > len(later)/2 {
				later, head = append(later[:0], later[head:]...), 0
			}
			again.Reset(max(turnLag-now.Sub(later[head].at), turnLag/4))
		case <-ctx.Done():
			return
		}
	}
}

// do records a search or a call.
func (r *Recorder) do(ctx context.Context, j job) {
	var err error
	if j.call == nil {
		err = r.search(ctx, j)
	} else {
		err = r.call(ctx, j)
	}
	if err != nil && ctx.Err() == nil {
		r.dropped.Add(1)
		r.log.Debug("usage: evidence not recorded", "error", err)
	}
}

// casAttempts bounds the retries of a write whose key changed meanwhile.
const casAttempts = 8

// search appends a search to its turn's record.
func (r *Recorder) search(ctx context.Context, j job) error {
	key, agent := TurnKey(j.turn), Token("agent", j.agent)
	wrote := false
	// A turn's first search, as a rule: its record is created unread.
	absent := r.turns.without(key, time.Now())
	err := r.update(ctx, key, r.cfg.TurnWindow, absent, func(value []byte) ([]byte, error) {
		rec := TurnRecord{Agent: agent}
		if value != nil {
			if err := json.Unmarshal(value, &rec); err != nil {
				return nil, fmt.Errorf("turn record: %w", err)
			}
			if rec.Agent != agent {
				return nil, nil // another agent's turn
			}
		}
		rec.Searches = append(rec.Searches, search.TurnSearch{Terms: j.terms, Tools: j.page})
		if n := len(rec.Searches); n > MaxTurnSearches {
			rec.Searches = slices.Delete(rec.Searches, 0, n-MaxTurnSearches)
		}
		wrote = true
		return json.Marshal(&rec)
	})
	if err == nil && wrote {
		r.turns.searched(key, time.Now())
		r.searches.Add(1)
	}
	return err
}

// call finds the evidence a call is, and waits for its result to record it.
func (r *Recorder) call(ctx context.Context, j job) error {
	c := j.call
	r.turnReads.Add(1)
	value, _, err := r.get(ctx, j.turnKey)
	if err != nil || value == nil {
		return err
	}
	var rec TurnRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return fmt.Errorf("turn record: %w", err)
	}
	if rec.Agent != Token("agent", c.Agent) || slices.Contains(rec.Counted, c.Tool) {
		return nil
	}
	terms := search.EvidenceTerms(rec.Searches, c.Tool)
	if len(terms) == 0 {
		return nil
	}
	select {
	case r.waiting <- struct{}{}:
	default:
		return errors.New("too many calls wait for their results")
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		defer func() { <-r.waiting }()
		wctx, cancel := context.WithTimeout(ctx, r.cfg.OutcomeWait)
		res, err := r.cfg.Outcome(wctx, c)
		cancel()
		if err != nil {
			return
		}
		if err := r.evidenceFor(ctx, c, j.user, terms, OutcomeWeight(res)); err != nil && ctx.Err() == nil {
			r.dropped.Add(1)
			r.log.Debug("usage: evidence not recorded", "tool", c.Tool, "error", err)
		}
	}()
	return nil
}

// evidenceFor counts the call's turn for its tool, once, and adds the
// evidence to the agent's record for the tool.
func (r *Recorder) evidenceFor(ctx context.Context, c *messages.CallRequest, user string, terms []string, weight float64) error {
	if weight <= 0 || !r.Enabled() {
		return nil
	}
	name, err := messages.ParseToolName(c.Tool)
	if err != nil {
		return err
	}
	counted := false
	err = r.update(ctx, TurnKey(c.Turn), r.cfg.TurnWindow, false, func(value []byte) ([]byte, error) {
		if value == nil {
			// The turn's record expired while the call ran: nothing
			// can count it twice any more.
			return nil, nil
		}
		var rec TurnRecord
		if err := json.Unmarshal(value, &rec); err != nil {
			return nil, err
		}
		if slices.Contains(rec.Counted, c.Tool) {
			counted = true
			return nil, nil
		}
		rec.Counted = append(rec.Counted, c.Tool)
		return json.Marshal(&rec)
	})
	if err != nil || counted {
		return err
	}
	now := time.Now().UTC()
	userToken := ""
	if user != "" {
		userToken = Token("user", user)
	}
	err = r.update(ctx, EvidenceKey(name, c.Agent), r.cfg.Retention, false, func(value []byte) ([]byte, error) {
		var rec search.UsageRecord
		if value != nil {
			if err := json.Unmarshal(value, &rec); err != nil {
				rec = search.UsageRecord{} // a damaged record starts again
			}
		}
		rec.Add(terms, weight, now, r.cfg.Learn)
		rec.User = userToken
		return json.Marshal(&rec)
	})
	if err == nil {
		r.evidence.Add(1)
	}
	return err
}

// OutcomeWeight is how much a call's result counts as evidence that the
// queries that found its tool asked for it: 1 for a call that completed
// without error; 0.5 for one whose tool reported an error, or that failed
// or timed out (the tool was chosen, nothing confirms the choice: errors
// come more often from arguments, data and health than from a wrong tool);
// 0 for a call that was cancelled (often a sign the tool was not what was
// wanted) or denied (a decision about permission, which must not let an
// agent shape the ranking of a tool it may not use). Evidence is never
// negative: an agent that made calls fail on purpose could otherwise push
// a tool down for everyone, which no cap on what it adds would bound.
func OutcomeWeight(res *messages.CallResult) float64 {
	if res == nil {
		return 0
	}
	switch res.Status {
	case messages.StateCompleted:
		if res.IsError {
			return 0.5
		}
		return 1
	case messages.StateFailed, messages.StateTimedOut:
		return 0.5
	}
	return 0
}

// get reads a key's value and revision; a key without a value is nil, 0.
func (r *Recorder) get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

// update rewrites a key by compare-and-set, with a TTL: change gets the
// current value (nil for none) and returns the new one, or nil to leave
// the key as it is. With absent, the key is taken to have no value
// without reading it first: a write that finds one reads it and tries
// again, as any write that finds the key changed does.
func (r *Recorder) update(ctx context.Context, key string, ttl time.Duration, absent bool, change func([]byte) ([]byte, error)) error {
	for attempt := range casAttempts {
		var value []byte
		var revision uint64
		if attempt > 0 || !absent {
			var err error
			if value, revision, err = r.get(ctx, key); err != nil {
				return err
			}
		}
		next, err := change(value)
		if err != nil || next == nil {
			return err
		}
		err = r.write(ctx, key, next, revision, ttl)
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
			continue
		}
		return err
	}
	return fmt.Errorf("usage key %s kept changing", key)
}

// write stores a value with a TTL if the key is still at revision (0: has
// no value).
func (r *Recorder) write(ctx context.Context, key string, value []byte, revision uint64, ttl time.Duration) error {
	if revision == 0 {
		_, err := r.kv.Create(ctx, key, value, jetstream.KeyTTL(ttl))
		return err
	}
	msg := &nats.Msg{Subject: "$KV." + r.kv.Bucket() + "." + key, Data: value}
	_, err := r.cfg.JS.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(revision), jetstream.WithMsgTTL(ttl))
	return err
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
