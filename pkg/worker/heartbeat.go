package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// heartbeats tell the catalog, for each namespace, that the worker serves
// it, how many of its slots are busy and which of its sources are down.
type heartbeats struct {
	workerID string
	interval time.Duration
	// leases count the busy slots.
	leases *leases
	log    *slog.Logger
}

type heartbeatStore interface {
	Heartbeat(ctx context.Context, hb *messages.WorkerHeartbeat) error
}

// send writes the namespace's heartbeat as it stands now.
func (h *heartbeats) send(ctx context.Context, store heartbeatStore, ns *namespace) error {
	ns.heartbeats.Lock()
	defer ns.heartbeats.Unlock()
	return store.Heartbeat(ctx, h.of(ns))
}

func (h *heartbeats) of(ns *namespace) *messages.WorkerHeartbeat {
	return &messages.WorkerHeartbeat{
		WorkerID:   h.workerID,
		Namespace:  ns.Name,
		Slots:      ns.Slots,
		Busy:       h.leases.busy(ns),
		Time:       time.Now().UTC(),
		IntervalMS: h.interval.Milliseconds(),
		Down:       downSources(ns),
	}
}

// loop sends the namespaces' heartbeats every interval until ctx ends.
func (h *heartbeats) loop(ctx context.Context, store heartbeatStore, nss []*namespace) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, ns := range nss {
				hctx, cancel := context.WithTimeout(ctx, h.interval)
				if err := h.send(hctx, store, ns); err != nil && ctx.Err() == nil {
					h.log.Warn("heartbeat failed", "namespace", ns.Name, "error", err)
				}
				cancel()
			}
		}
	}
}
