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
