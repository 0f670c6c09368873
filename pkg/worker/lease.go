package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
	"github.com/toolbus/toolbus/pkg/messages"
)

// leases are the calls whose tools run in this worker: it keeps their
// messages leased, records their starts, counts each namespace's busy
// slots, and ends the calls cancelled or finished without this worker.
type leases struct {
	workerID   string
	startDelay time.Duration
	ackWait    time.Duration
	ledger     *ledger.Ledger
	log        *slog.Logger
	// bg counts the worker's goroutines, the checks of calls in flight among them.
	bg *sync.WaitGroup

	// mu guards inflight, the busy count of every namespace and the sweep's timer.
	mu       sync.Mutex
	inflight map[string]*inflight
	// startSweep records the starts of calls that have run for startDelay
	// (see recordStart); it is armed while some call's start is due.
	startSweep      *time.Timer
	startSweepArmed bool
	// checking is set while the loop's check of the calls in flight runs
	// (see loop).
	checking atomic.Bool
}

// inflight is a call whose tool runs in this worker: its lease is renewed
// and its start recorded while it is tracked.
type inflight struct {
	call *Call
	ns   *namespace
	// bucket is the call's: the one its queued event's subject names.
	bucket  string
	msg     jetstream.Msg
	cancel  context.CancelCauseFunc
	started time.Time
	log     *callLog

	startOnce     sync.Once
	startRecorded atomic.Bool
}

// track registers a call that is about to run, and makes sure its start
// gets recorded if it runs for StartDelay.
func (l *leases) track(f *inflight) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight[f.call.ID] = f
	f.ns.busy++
	metrics.CallRunning(f.call.Tool, f.ns.Name, 1)
	if f.call.Attempt > 1 {
		metrics.Redelivered(f.call.Tool, f.ns.Name)
	}
	if !l.startSweepArmed {
		l.startSweepArmed = true
		if l.startSweep == nil {
			l.startSweep = time.AfterFunc(l.startDelay, l.sweepStarts)
		} else {
			l.startSweep.Reset(l.startDelay)
		}
	}
}

// recordStart stores the call's started event, once. It is recorded once
// the tool has run for StartDelay or reports something, whichever comes
// first; a call that finishes sooner goes from queued to its result
// without it, which spares the hot path a write. The result write is
// conditional anyway, and a call that already has a result (cancelled
// while queued) is stopped by the cancel signal or when the lease loop
// checks it.
func (l *leases) recordStart(f *inflight) {
	f.startOnce.Do(func() {
		f.startRecorded.Store(true)
		if err := l.ledger.Start(f.bucket, f.ns.Name, &messages.CallEvent{CallID: f.call.ID, Time: f.started, Attempt: f.call.Attempt, Worker: l.workerID}); err != nil {
			f.log.Warn("start of the call not recorded", "error", err)
		}
	})
}

// sweepStarts records the starts that are due, and waits for the next one.
// One timer for all calls costs less than one per call, which most calls
// would stop unfired.
func (l *leases) sweepStarts() {
	now := time.Now()
	var due []*inflight
	var next time.Duration
	l.mu.Lock()
	for _, f := range l.inflight {
		if f.startRecorded.Load() {
			continue
		}
		if wait := l.startDelay - now.Sub(f.started); wait <= 0 {
			due = append(due, f)
		} else if next == 0 || wait < next {
			next = wait
		}
	}
	if next > 0 {
		l.startSweep.Reset(next)
	} else {
		l.startSweepArmed = false
	}
	l.mu.Unlock()
	for _, f := range due {
		l.recordStart(f)
	}
}

// untrack forgets a call once its tool's outcome is decided; a later
// attempt of the same call tracked meanwhile is left alone.
func (l *leases) untrack(f *inflight) {
	l.mu.Lock()
	if l.inflight[f.call.ID] == f {
		delete(l.inflight, f.call.ID)
		f.ns.busy--
		metrics.CallRunning(f.call.Tool, f.ns.Name, -1)
	}
	l.mu.Unlock()
}

// busy returns how many calls of the namespace run in this worker.
func (l *leases) busy(ns *namespace) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ns.busy
}

// cancelAll ends the context of every call in flight with cause.
func (l *leases) cancelAll(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.inflight {
		f.cancel(cause)
	}
}

// loop keeps the calls in flight, and those held for a slot, leased:
// every third of AckWait it tells JetStream they are in progress, and it checks the ledger for
// cancellations whose signal this worker may have missed. The check runs
// apart, so that its reads never hold up the next renewal, and one at a
// time: a tick that finds the last check still running skips its own.
func (l *leases) loop(ctx context.Context, nss []*namespace) {
	defer l.bg.Done()
	t := time.NewTicker(l.ackWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			var ids []string
			l.mu.Lock()
			for _, ns := range nss {
				if ns.poller != nil {
					ns.poller.renewHeld(now)
				}
			}
			for id, f := range l.inflight {
				if err := f.msg.InProgress(); err != nil {
					l.log.Warn("lease renewal failed", "call", id, "error", err)
				}
				if time.Since(f.started) > l.ackWait/3 {
					ids = append(ids, id)
				}
			}
			l.mu.Unlock()
			if len(ids) > 0 && l.checking.CompareAndSwap(false, true) {
				l.bg.Add(1)
				go func() {
					defer l.bg.Done()
					defer l.checking.Store(false)
					l.checkCancelled(ctx, ids)
				}()
			}
		}
	}
}

// ids returns the IDs of the calls in flight.
func (l *leases) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.inflight))
	for id := range l.inflight {
		ids = append(ids, id)
	}
	return ids
}

// checkReads bounds the reads of checkCancelled in flight at once.
const checkReads = 8

// checkCancelled reads whether the calls in flight got a result or a
// cancellation, with two direct gets of each call's own namespace's event
// subjects (see ledger.ReadOwn), at most checkReads calls at a time.
func (l *leases) checkCancelled(ctx context.Context, ids []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, checkReads)
	for _, id := range ids {
		l.mu.Lock()
		f := l.inflight[id]
		l.mu.Unlock()
		if f == nil {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			l.checkCall(ctx, f)
		})
	}
	wg.Wait()
}

// checkCall ends a call in flight that got a result or a cancellation
// this worker did not hear of.
func (l *leases) checkCall(ctx context.Context, f *inflight) {
	id := f.call.ID
	s, err := l.ledger.ReadOwn(ctx, f.bucket, f.ns.Name, id, messages.EventResult, messages.EventCancel)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("check cancellations", "call", id, "error", err)
		}
		return
	}
	switch {
	case s.Result != nil:
		// Finished without this worker: cancelled while its start was
		// not yet stored, or completed by another attempt.
		f.cancel(ErrSuperseded)
	case s.Cancel != nil:
		l.cancelCall(id, s.Cancel.Cancel)
	}
}

func (l *leases) cancelCall(id string, info *messages.CancelInfo) {
	l.mu.Lock()
	f := l.inflight[id]
	l.mu.Unlock()
	if f == nil {
		return
	}
	reason := "cancelled"
	if info != nil && info.Reason != "" {
		reason = info.Reason
	}
	f.cancel(&cancelError{reason: reason})
}
