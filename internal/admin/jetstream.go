package admin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Bounds of the console's own JetStream reads (the workers' heartbeats,
// the audit stream, a call's trace context).
const (
	// jetStreamProbeTimeout bounds the check that the console's NATS user
	// has JetStream at all (JetStream's account info, which every user of deploy/nats
	// may ask); jetStreamProbeTTL is how long its answer is kept.
	jetStreamProbeTimeout = 2 * time.Second
	jetStreamProbeTTL     = time.Minute
	// jetStreamReadTimeout bounds a read of a bucket or a stream by a
	// page, so that a user whose permissions drop the request (it is
	// never answered) costs a page this long at most.
	jetStreamReadTimeout = 3 * time.Second
)

var errNoJetStream = errors.New("this console reads no JetStream")

// jetStreamProbe remembers whether the console's user has JetStream.
type jetStreamProbe struct {
	mu      sync.Mutex
	checked time.Time
	err     error
}

// jetStreamReads reports whether the console can read JetStream itself,
// checking at most once a jetStreamProbeTTL. An operator of an
// installation with identities has no JetStream: the server answers
// the account-info request so, at once, where any other request would go unanswered.
func (c *Console) jetStreamReads(ctx context.Context) error {
	if c.cfg.JetStream == nil {
		return errNoJetStream
	}
	p := &c.jsProbe
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.checked.IsZero() && time.Since(p.checked) < jetStreamProbeTTL {
		return p.err
	}
	ctx, cancel := context.WithTimeout(ctx, jetStreamProbeTimeout)
	defer cancel()
	_, err := c.cfg.JetStream.AccountInfo(ctx)
	if err != nil {
		err = fmt.Errorf("the console's NATS user has no JetStream (%v)", err)
	}
	p.checked, p.err = time.Now(), err
	return err
}
