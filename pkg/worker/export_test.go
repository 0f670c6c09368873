package worker

// SlotCounts is what a namespace's slots have been through, for tests.
type SlotCounts struct {
	Size, Free int
	Taken      int64
	// Released counts the releases that freed a slot, by reason; Again
	// the ones that found it free already.
	Released map[string]int64
	Again    int64
}

// ReleasedTotal is the number of slots freed, whatever the reason.
func (c SlotCounts) ReleasedTotal() int64 {
	var n int64
	for _, v := range c.Released {
		n += v
	}
	return n
}

// Slots returns the slot counts of one of the worker's namespaces.
func Slots(w *Worker, namespace string) SlotCounts {
	w.mu.Lock()
	var s *slots
	for _, ns := range w.namespaces {
		if ns.Name == namespace && ns.poller != nil {
			s = ns.poller.slots
		}
	}
	w.mu.Unlock()
	if s == nil {
		return SlotCounts{}
	}
	c := SlotCounts{Size: s.size, Free: s.freeCount(), Taken: s.taken.Load(), Released: map[string]int64{}, Again: s.again.Load()}
	for r := range slotReasons {
		if n := s.released[r].Load(); n > 0 {
			c.Released[r.String()] = n
		}
	}
	return c
}

// Held returns how many calls of a namespace wait for a free slot, and how
// many times the leases of held calls were renewed.
func Held(w *Worker, namespace string) (held int, renewals int64) {
	p := pollerOf(w, namespace)
	if p == nil {
		return 0, 0
	}
	return p.heldCount(), p.heldRenewals.Load()
}

// PullInbox returns the prefix of the reply subjects of a namespace's
// current pull requests.
func PullInbox(w *Worker, namespace string) string {
	if p := pollerOf(w, namespace); p != nil {
		return p.requests.Inbox()
	}
	return ""
}

func pollerOf(w *Worker, namespace string) *poller {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ns := range w.namespaces {
		if ns.Name == namespace {
			return ns.poller
		}
	}
	return nil
}

// CommitRetries returns how many times the worker retried writing a result.
func CommitRetries(w *Worker) int64 { return w.results.retries.Load() }
