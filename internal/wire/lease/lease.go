// Package lease elects one holder among processes that may all do a duty
// but should not do it at once: the holder of a lease kept under a key of
// a KV bucket, which only ever moves by compare-and-set. The indexers
// elect the one that writes the index with it, the coordinators the one
// that copies audit records and the one that follows settled calls.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
)

// Lease elects one holder of a duty through the value under its key.
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
type Lease struct {
	kv     jetstream.KeyValue
	key    string
	duty   string // for the log
	metric string // the duty in toolbus.lease.held: its words joined by "_"
	record record // what this holder writes when it takes or renews the lease
	ttl    time.Duration
	log    *slog.Logger

	mu         sync.Mutex
	held       bool   // this holder wrote the last revision it knows of
	revision   uint64 // of that write, while held
	validUntil time.Time
	reported   bool // the last validity sent on events

	// events receives a value whenever the lease becomes valid or stops being valid.
	events chan struct{}
}

// record is the lease's value; Holder and RenewedAt are for people
// looking at the bucket.
type record struct {
	Holder    string    `json:"holder"`
	Token     string    `json:"token"`
	TTLMS     int64     `json:"ttl_ms"`
	RenewedAt time.Time `json:"renewed_at"`
}

// New makes the lease of a duty under key for holder, a name for people
// reading the bucket; duty names the lease in the log ("index lease
// taken"). Each Lease has a token of its own, so two processes with one
// name do not take each other's lease for theirs.
func New(kv jetstream.KeyValue, key, duty, holder string, ttl time.Duration, log *slog.Logger) *Lease {
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	return &Lease{kv: kv, key: key, record: record{Holder: holder, Token: hex.EncodeToString(token), TTLMS: ttl.Milliseconds()}, duty: duty, metric: strings.ReplaceAll(duty, " ", "_"), ttl: ttl, log: log.With("key", key), events: make(chan struct{}, 1)}
}

// Holder is the name this lease writes as its holder's.
func (l *Lease) Holder() string { return l.record.Holder }

// Changes receives a value whenever the lease becomes valid or stops being
// valid; read Valid to know which.
func (l *Lease) Changes() <-chan struct{} { return l.events }

// Watch starts watching the lease's key, for Run.
func (l *Lease) Watch(ctx context.Context) (jetstream.KeyWatcher, error) {
	return l.kv.Watch(ctx, l.key)
}

// Valid reports whether this process holds the lease and may do its duty.
func (l *Lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held && time.Now().Before(l.validUntil)
}

func (l *Lease) notify() {
	valid := l.Valid()
	l.mu.Lock()
	changed := valid != l.reported
	l.reported = valid
	l.mu.Unlock()
	if changed {
		metrics.LeaseHeld(l.metric, valid)
		select {
		case l.events <- struct{}{}:
		default:
		}
	}
}

// Run takes, renews and watches the lease until ctx ends, through w from
// Watch.
func (l *Lease) Run(ctx context.Context, w jetstream.KeyWatcher) {
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
	metrics.LeaseHeld(l.metric, false) // a standby until it takes the lease
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
				l.log.Warn(l.duty + " lease watch ended")
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
			var rec record
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
				l.log.Warn(l.duty+" lease lost", "holder", rec.Holder)
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
func (l *Lease) take(ctx context.Context, exists bool, seenRev uint64) {
	opCtx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	start := time.Now()
	var rev uint64
	var err error
	if exists {
		rev, err = l.kv.Update(opCtx, l.key, l.stamped(), seenRev)
	} else {
		rev, err = l.kv.Create(opCtx, l.key, l.stamped())
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return // another standby was quicker; the watch will say who
	}
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("take the "+l.duty+" lease", "error", err)
		}
		return
	}
	l.mu.Lock()
	l.held, l.revision, l.validUntil = true, rev, start.Add(l.ttl*3/4)
	l.mu.Unlock()
	l.log.Info(l.duty+" lease taken", "holder", l.record.Holder)
}

func (l *Lease) renew(ctx context.Context) {
	opCtx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	l.mu.Lock()
	held, revision := l.held, l.revision
	l.mu.Unlock()
	if !held {
		return
	}
	start := time.Now()
	rev, err := l.kv.Update(opCtx, l.key, l.stamped(), revision)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.revision, l.validUntil = rev, start.Add(l.ttl*3/4)
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		l.held = false
		l.log.Warn(l.duty + " lease lost")
	default:
		// Still ours unless a standby takes it; the validity runs out meanwhile.
		if ctx.Err() == nil {
			l.log.Warn("renew the "+l.duty+" lease", "error", err)
		}
	}
}

// Release deletes the lease if this process holds it, so that a standby
// takes over at once. Call it once Run has returned.
func (l *Lease) Release(ctx context.Context) {
	l.mu.Lock()
	held, revision := l.held, l.revision
	l.held = false
	l.mu.Unlock()
	if !held {
		return
	}
	metrics.LeaseHeld(l.metric, false)
	if err := l.kv.Delete(ctx, l.key, jetstream.LastRevision(revision)); err != nil {
		l.log.Warn("release the "+l.duty+" lease", "error", err)
	}
}

func (l *Lease) stamped() []byte {
	rec := l.record
	rec.RenewedAt = time.Now().UTC()
	b, _ := json.Marshal(rec)
	return b
}
