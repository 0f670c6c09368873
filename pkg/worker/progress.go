package worker

import (
	"sync"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// progressReporter coalesces a tool's progress reports so that a tool that
// reports in a tight loop does not flood the events stream: at most one
// event per interval, and the latest report is never lost.
type progressReporter struct {
	interval time.Duration
	publish  func(messages.Progress)

	mu      sync.Mutex
	last    time.Time
	pending *messages.Progress
	timer   *time.Timer
	closed  bool
}

func (r *progressReporter) report(p messages.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	now := time.Now()
	if wait := r.interval - now.Sub(r.last); wait > 0 {
		r.pending = &p
		if r.timer == nil {
			r.timer = time.AfterFunc(wait, r.flushLater)
		}
		return
	}
	// A report sent at once supersedes one still waiting for a timer that
	// fired late: sending that one afterwards would put progress backwards.
	r.pending = nil
	r.last = now
	r.publish(p)
}

func (r *progressReporter) flushLater() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	if r.closed || r.pending == nil {
		return
	}
	r.last = time.Now()
	r.publish(*r.pending)
	r.pending = nil
}

// close publishes the pending report, if any, and ignores later ones.
// Events published before close returns are sent before anything the
// caller publishes afterwards.
func (r *progressReporter) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if r.pending != nil {
		r.publish(*r.pending)
		r.pending = nil
	}
}
