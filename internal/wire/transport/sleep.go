package transport

import (
	"context"
	"time"
)

// Sleep waits for d and returns nil, or returns ctx.Err() if ctx ends first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
