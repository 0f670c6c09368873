package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
	"github.com/toolbus/toolbus/pkg/messages"
)

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
func (w *Worker) track(f *inflight) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight[f.call.ID] = f
	f.ns.busy++
	metrics.CallRunning(f.call.Tool, f.ns.Name, 1)
	if f.call.Attempt > 1 {
		metrics.Redelivered(f.call.Tool, f.ns.Name)
	}
	if !w.startSweepArmed {
		w.startSweepArmed = true
		if w.startSweep == nil {
			w.startSweep = time.AfterFunc(w.cfg.StartDelay, w.sweepStarts)
		} else {
			w.startSweep.Reset(w.cfg.StartDelay)
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
func (w *Worker) recordStart(f *inflight) {
	f.startOnce.Do(func() {
		f.startRecorded.Store(true)
		if err := w.ledger.Start(f.bucket, f.ns.Name, &messages.CallEvent{CallID: f.call.ID, Time: f.started, Attempt: f.call.Attempt, Worker: w.cfg.ID}); err != nil {
			f.log.Warn("start of the call not recorded", "error", err)
		}
	})
}

// sweepStarts records the starts that are due, and waits for the next one.
// One timer for all calls costs less than one per call, which most calls
// would stop unfired.
func (w *Worker) sweepStarts() {
	now := time.Now()
	var due []*inflight
	var next time.Duration
	w.mu.Lock()
	for _, f := range w.inflight {
		if f.startRecorded.Load() {
			continue
		}
		if wait := w.cfg.StartDelay - now.Sub(f.started); wait <= 0 {
			due = append(due, f)
		} else if next == 0 || wait < next {
			next = wait
		}
	}
	if next > 0 {
		w.startSweep.Reset(next)
	} else {
		w.startSweepArmed = false
	}
	w.mu.Unlock()
	for _, f := range due {
		w.recordStart(f)
	}
}

// untrack forgets a call once its tool's outcome is decided; a later
// attempt of the same call tracked meanwhile is left alone.
func (w *Worker) untrack(f *inflight) {
	w.mu.Lock()
	if w.inflight[f.call.ID] == f {
		delete(w.inflight, f.call.ID)
		f.ns.busy--
		metrics.CallRunning(f.call.Tool, f.ns.Name, -1)
	}
	w.mu.Unlock()
}

// leaseLoop keeps the calls in flight, and those held for a slot, leased:
// every third of AckWait it tells JetStream they are in progress, and it checks the ledger for
// cancellations whose signal this worker may have missed. The check runs
// apart, so that its reads never hold up the next renewal, and one at a
// time: a tick that finds the last check still running skips its own.
func (w *Worker) leaseLoop(ctx context.Context) {
	defer w.bg.Done()
	t := time.NewTicker(w.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			var ids []string
			w.mu.Lock()
			for _, ns := range w.namespaces {
				if ns.poller != nil {
					ns.poller.renewHeld(now)
				}
			}
			for id, f := range w.inflight {
				if err := f.msg.InProgress(); err != nil {
					w.log.Warn("lease renewal failed", "call", id, "error", err)
				}
				if time.Since(f.started) > w.cfg.AckWait/3 {
					ids = append(ids, id)
				}
			}
			w.mu.Unlock()
			if len(ids) > 0 && w.checking.CompareAndSwap(false, true) {
				w.bg.Add(1)
				go func() {
					defer w.bg.Done()
					defer w.checking.Store(false)
					w.checkCancelled(ctx, ids)
				}()
			}
		}
	}
}
