package usage

import (
	"sync"
	"time"
)

// maxTurnsKnown bounds the turns with searches a recorder remembers;
// past it, it reads every call's turn record, as when it knows nothing.
const maxTurnsKnown = 1 << 18

// turnSet is what a recorder knows of the turns that have searches: the
// keys of the turn records in the usage bucket, from a watch of them (the
// searches of every coordinator) and from its own writes, so that a call
// in a turn without one costs no read. Until the watch has delivered the
// records there were, after it stopped, and when the set is full, it
// knows nothing and every call's record is read.
type turnSet struct {
	window time.Duration

	// readyCh is closed when the set is first ready.
	readyCh chan struct{}

	mu    sync.Mutex
	ready bool
	full  bool
	seen  map[string]time.Time
	// prunedAt is when the set was last pruned: a full set is pruned at
	// most once per pruneEvery, not at every search.
	prunedAt time.Time
}

// pruneEvery is how often a full set may look for expired turns: each
// look walks the whole set.
const pruneEvery = time.Minute

func newTurnSet(window time.Duration) *turnSet {
	return &turnSet{window: window, seen: make(map[string]time.Time), readyCh: make(chan struct{})}
}

// searched notes that the turn record key exists, as of now.
func (s *turnSet) searched(key string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[key]; !ok && len(s.seen) >= maxTurnsKnown {
		if now.Sub(s.prunedAt) >= pruneEvery {
			s.prune(now)
		}
		if len(s.seen) >= maxTurnsKnown {
			s.full = true
			return
		}
	}
	s.seen[key] = now
}

// removed notes that the turn record key is gone.
func (s *turnSet) removed(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, key)
}

// setReady says whether the set holds every turn record there is (the
// watch delivered those there were and still follows the bucket).
func (s *turnSet) setReady(ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ready && !s.ready {
		select {
		case <-s.readyCh:
		default:
			close(s.readyCh)
		}
	}
	s.ready = ready
}

// without tells that the turn record key surely does not exist: no
// search of the turn was recorded within the turn window.
func (s *turnSet) without(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready || s.full {
		return false
	}
	at, ok := s.seen[key]
	if ok && now.Sub(at) > s.window {
		// Its record has expired, and expiry leaves no marker to watch.
		delete(s.seen, key)
		ok = false
	}
	return !ok
}

// prune forgets the turns whose records have expired.
func (s *turnSet) prune(now time.Time) {
	s.prunedAt = now
	for key, at := range s.seen {
		if now.Sub(at) > s.window {
			delete(s.seen, key)
		}
	}
	s.full = len(s.seen) >= maxTurnsKnown
}
