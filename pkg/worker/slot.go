package worker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
)

// slotReason says why a slot was released.
type slotReason uint8

const (
	// slotSettled: the call's message was settled (acknowledged, handed
	// back or terminated) by the goroutine that ran it.
	slotSettled slotReason = iota
	// slotRefused: the call was settled without its tool running (an
	// unreadable message, too many attempts, a deadline already passed, a
	// tool not served here, a result already stored).
	slotRefused
	// slotCommitted: the stream answered the write of the call's result.
	slotCommitted
	// slotStraggled: a tool that outlived its call returned at last.
	slotStraggled
	// slotAbandoned: Stop gave up on a tool that ignores its context; its
	// goroutine is left behind.
	slotAbandoned
	slotReasons
)

var slotReasonNames = [slotReasons]string{"settled", "refused", "committed", "straggled", "abandoned"}

func (r slotReason) String() string { return slotReasonNames[r] }

// slots are a namespace's places for calls: a call runs only in a slot
// taken when its message arrived, and the slot is free again once the call
// is over, its result written and its message settled, or once Stop gives
// up on its tool. The poller never asks for more messages than slots are free.
type slots struct {
	size int
	// freed tells the poller that it may ask for more.
	freed func()
	// namespace names the slots in metrics.
	namespace string

	mu   sync.Mutex
	free int
	// taken counts every slot handed out; released, by reason, every one
	// given back. Equal when no call is in a slot.
	taken    atomic.Int64
	released [slotReasons]atomic.Int64
	// again counts releases of slots already free, which do nothing.
	again atomic.Int64
	inUse sync.WaitGroup
}

func newSlots(size int, freed func()) *slots {
	return &slots{size: size, free: size, freed: freed}
}

// take returns a free slot, or nil when none is.
func (s *slots) take() *slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free == 0 {
		return nil
	}
	s.free--
	s.inUse.Add(1)
	s.taken.Add(1)
	metrics.SlotsBusy(s.namespace, 1)
	return &slot{owner: s}
}

// freeCount returns how many slots are free.
func (s *slots) freeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free
}

// wait returns once every slot taken so far is released.
func (s *slots) wait() { s.inUse.Wait() }

// slot is one call's place, with its permit to run: it is released exactly
// once, whichever of the paths that end a call gets there first.
type slot struct {
	owner    *slots
	released atomic.Bool
}

// Release frees the slot and reports whether this call did; later calls do nothing.
func (s *slot) Release(reason slotReason) bool {
	if !s.released.CompareAndSwap(false, true) {
		s.owner.again.Add(1)
		return false
	}
	o := s.owner
	o.mu.Lock()
	o.free++
	o.mu.Unlock()
	o.released[reason].Add(1)
	metrics.SlotsBusy(o.namespace, -1)
	o.inUse.Done()
	o.freed()
	return true
}

// stragglerWarning is how long after its call ended a tool that ignores its
// context runs before the worker logs it.
const stragglerWarning = 10 * time.Second

// toolRun is what the two deciders of a call share about its tool.
type toolRun struct {
	mu       sync.Mutex
	returned bool
	warn     *time.Timer
	// deciding is held while the context's end settles the call.
	deciding sync.WaitGroup
}

// stragglers are the tools that outlived their calls, with the slots they
// hold until they return or Stop gives up on them.
type stragglers struct {
	mu    sync.Mutex
	slots map[string]*slot
	// abandoned is closed when Stop gives up on tools that ignore their context.
	abandoned chan struct{}
}

func newStragglers() *stragglers {
	return &stragglers{slots: map[string]*slot{}, abandoned: make(chan struct{})}
}

// straggling records a tool that outlived its call: it keeps its slot
// until it returns, so that the worker never runs more tools than it has
// slots, unless Stop gives up on it and releases the slot.
func (g *stragglers) straggling(callID string, run *toolRun, s *slot, log interface{ Warn(string, ...any) }) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.returned {
		return
	}
	g.mu.Lock()
	select {
	case <-g.abandoned:
		// Stop has given up on tools that ignore their context.
		g.mu.Unlock()
		s.Release(slotAbandoned)
		return
	default:
	}
	g.slots[callID] = s
	g.mu.Unlock()
	run.warn = time.AfterFunc(stragglerWarning, func() {
		log.Warn("tool still running after its call ended; it ignores its context and holds a slot")
	})
}

// straggled forgets a tool that outlived its call once it returned; its
// slot is then released, unless Stop already did.
func (g *stragglers) straggled(callID string, run *toolRun) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.returned = true
	if run.warn != nil {
		run.warn.Stop()
	}
	g.mu.Lock()
	delete(g.slots, callID)
	g.mu.Unlock()
}

// abandon gives up on the tools that ignore their context: their slots
// are freed now and their goroutines left behind. Called by Stop.
func (g *stragglers) abandon() {
	g.mu.Lock()
	close(g.abandoned)
	slots := g.slots
	g.slots = map[string]*slot{}
	g.mu.Unlock()
	for _, s := range slots {
		s.Release(slotAbandoned)
	}
}
