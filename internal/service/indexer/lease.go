package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/discovery"
)

// lease elects the one indexer that writes, through the value under
// discovery.LeaseKey, which only ever moves by compare-and-set.
//
// The holder renews it every ttl/3. A standby watches the key and takes the
// lease over, by compare-and-set on the revision it last saw, once it has
// seen no renewal for ttl by its own clock, checking every ttl/3: a dead
// holder is replaced within ttl to 4/3 ttl, or at once when a holder that
// stops deletes the key. The holder counts its lease as valid for 3/4 ttl
// from the start of its last successful renewal, and writes only while it
// is: a standby saw that renewal no earlier than it started, so the holder
// stops writing a quarter ttl before a standby may start. No clocks are
// compared between machines.
type lease struct {
	kv     jetstream.KeyValue
	record leaseRecord // what this indexer writes when it takes or renews the lease
	ttl    time.Duration
	log    *slog.Logger

	mu         sync.Mutex
	held       bool   // this indexer wrote the last revision it knows of
	revision   uint64 // of that write, while held
	validUntil time.Time
	reported   bool // the last validity sent on events

	// events receives a value whenever the lease becomes valid or stops being valid.
	events chan struct{}
}

// leaseRecord is the lease's value; Holder and RenewedAt are for people
// looking at the bucket.
type leaseRecord struct {
	Holder    string    `json:"holder"`
	Token     string    `json:"token"`
	TTLMS     int64     `json:"ttl_ms"`
	RenewedAt time.Time `json:"renewed_at"`
}

func newLease(kv jetstream.KeyValue, holder, token string, ttl time.Duration, log *slog.Logger) *lease {
	return &lease{kv: kv, record: leaseRecord{Holder: holder, Token: token, TTLMS: ttl.Milliseconds()}, ttl: ttl, log: log, events: make(chan struct{}, 1)}
}

// Valid reports whether this indexer holds the lease and may write.
func (l *lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held && time.Now().Before(l.validUntil)
}

func (l *lease) notify() {
	valid := l.Valid()
	l.mu.Lock()
	changed := valid != l.reported
	l.reported = valid
	l.mu.Unlock()
	if changed {
		select {
		case l.events <- struct{}{}:
		default:
		}
	}
}

// run takes, renews and watches the lease until ctx ends.
func (l *lease) run(ctx context.Context, w jetstream.KeyWatcher) {
	defer w.Stop()
	var (
		exists   bool // the key holds a lease, someone's
		seenRev  uint64
		seenAt   time.Time
		tick     = time.NewTicker(l.ttl / 3)
		updates  = w.Updates()
		initial  = true
		validity *time.Timer // fires when the lease would lapse without a renewal
	)
	defer tick.Stop()
	validity = time.NewTimer(time.Hour)
	validity.Stop()
	defer validity.Stop()
	attempt := func() {
		l.mu.Lock()
		held := l.held
		l.mu.Unlock()
		if held {
			l.renew(ctx)
		} else if !exists || time.Since(seenAt) >= l.ttl {
			l.take(ctx, exists, seenRev)
		}
		l.mu.Lock()
		if l.held {
			validity.Reset(time.Until(l.validUntil))
		}
		l.mu.Unlock()
		l.notify()
	}
	for {
		select {
		case e, ok := <-updates:
			if !ok {
				l.log.Warn("indexer: lease watch ended")
				updates = nil
				continue
			}
			if e == nil {
				initial = false
				if !exists {
					attempt()
				}
				continue
			}
			seenRev, seenAt = e.Revision(), time.Now()
			exists = e.Operation() == jetstream.KeyValuePut
			var rec leaseRecord
			if exists {
				_ = json.Unmarshal(e.Value(), &rec)
			}
			l.mu.Lock()
			lost := l.held && e.Revision() > l.revision && (!exists || rec.Token != l.record.Token)
			if lost {
				l.held = false
			}
			l.mu.Unlock()
			if lost {
				l.log.Warn("indexer: index lease lost", "holder", rec.Holder)
				l.notify()
			}
			if !exists && !initial {
				attempt() // the holder stepped down
			}
		case <-tick.C:
			attempt()
		case <-validity.C:
			l.notify()
		case <-ctx.Done():
			return
		}
	}
}

// take tries to take the lease: create it, or replace the revision seen.
func (l *lease) take(ctx context.Context, exists bool, seenRev uint64) {
	opCtx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	start := time.Now()
	var rev uint64
	var err error
	if exists {
		rev, err = l.kv.Update(opCtx, discovery.LeaseKey, l.stamped(), seenRev)
	} else {
		rev, err = l.kv.Create(opCtx, discovery.LeaseKey, l.stamped())
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return // another standby was quicker; the watch will say who
	}
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("indexer: take the index lease", "error", err)
		}
		return
	}
	l.mu.Lock()
	l.held, l.revision, l.validUntil = true, rev, start.Add(l.ttl*3/4)
	l.mu.Unlock()
	l.log.Info("indexer: index lease taken; this indexer writes the index")
}

func (l *lease) renew(ctx context.Context) {
	opCtx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	l.mu.Lock()
	held, revision := l.held, l.revision
	l.mu.Unlock()
	if !held {
		return
	}
	start := time.Now()
	rev, err := l.kv.Update(opCtx, discovery.LeaseKey, l.stamped(), revision)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.revision, l.validUntil = rev, start.Add(l.ttl*3/4)
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		l.held = false
		l.log.Warn("indexer: index lease lost")
	default:
		// Still ours unless a standby takes it; the validity runs out meanwhile.
		if ctx.Err() == nil {
			l.log.Warn("indexer: renew the index lease", "error", err)
		}
	}
}

// release deletes the lease if this indexer holds it, so that a standby
// takes over at once.
func (l *lease) release(ctx context.Context) {
	l.mu.Lock()
	held, revision := l.held, l.revision
	l.held = false
	l.mu.Unlock()
	if !held {
		return
	}
	if err := l.kv.Delete(ctx, discovery.LeaseKey, jetstream.LastRevision(revision)); err != nil {
		l.log.Warn("indexer: release the index lease", "error", err)
	}
}

func (l *lease) stamped() []byte {
	rec := l.record
	rec.RenewedAt = time.Now().UTC()
	b, _ := json.Marshal(rec)
	return b
}
