package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/instance"
	"github.com/toolbus/toolbus/internal/wire/lease"
)

// DefaultDutyLeaseTTL is how long a coordinator that died keeps a duty
// (Config.DutyLeaseTTL).
const DefaultDutyLeaseTTL = 10 * time.Second

// The keys of the duties' leases in the catalog bucket.
const (
	auditCopyDutyKey    = "coordinators.audit_copy"
	settledSweepDutyKey = "coordinators.settled_sweep"
)

// duties are the work each coordinator can do and one at a time does:
// copying the decisions of allowed calls into the audit stream, and
// following the queued and result events for the sweep of settled calls.
// Each reads every call's events, so that every coordinator doing it
// would cost each call a delivery per coordinator. A lease in the catalog
// bucket names the coordinator that does each (package lease for its
// timing); the others stand by and take it over when its holder stops
// (at once) or dies (within 4/3 of Config.DutyLeaseTTL).
type duties struct {
	auditCopy, settledSweep *lease.Lease

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startDuties starts competing for the duties this coordinator does: the
// sweep of settled calls always, the audit copy unless its configuration
// leaves it to others.
func startDuties(ctx context.Context, kv jetstream.KeyValue, cfg Config) (*duties, error) {
	holder := instance.ID("coordinator")
	d := &duties{settledSweep: lease.New(kv, settledSweepDutyKey, "settled sweep", holder, cfg.DutyLeaseTTL, cfg.Logger)}
	if cfg.AuditCopyInterval >= 0 {
		d.auditCopy = lease.New(kv, auditCopyDutyKey, "audit copy", holder, cfg.DutyLeaseTTL, cfg.Logger)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	for _, l := range d.leases() {
		w, err := l.Watch(runCtx)
		if err != nil {
			d.stop(ctx)
			return nil, err
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			l.Run(runCtx, w)
		}()
	}
	return d, nil
}

func (d *duties) leases() []*lease.Lease {
	if d.auditCopy == nil {
		return []*lease.Lease{d.settledSweep}
	}
	return []*lease.Lease{d.settledSweep, d.auditCopy}
}

// stop stops renewing and releases the leases held, so that standbys take
// the duties over at once.
func (d *duties) stop(ctx context.Context) error {
	d.cancel()
	d.wg.Wait()
	for _, l := range d.leases() {
		l.Release(ctx)
	}
	return nil
}

// whileHeld runs do with a context that ends when ctx does or the lease
// stops being valid, as soon as it is; it returns when do does.
func whileHeld(ctx context.Context, l *lease.Lease, do func(context.Context)) {
	for !l.Valid() {
		select {
		case <-ctx.Done():
			return
		case <-l.Changes():
		}
	}
	heldCtx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-heldCtx.Done():
				return
			case <-l.Changes():
				if !l.Valid() {
					cancel()
					return
				}
			}
		}
	}()
	do(heldCtx)
	cancel()
	<-watched
}
