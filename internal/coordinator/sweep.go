package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// maxDeliveriesAdvisory is what JetStream publishes when a call was
// delivered as often as its consumer allows without being acknowledged.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// watchMaxDeliveries fails calls whose every delivery was lost. Workers
// normally record that failure on the extra delivery the consumer allows;
// this covers the case where that delivery was lost too.
func (c *Coordinator) watchMaxDeliveries(ctx context.Context) error {
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + c.names.CallsStream() + ".*"
	sub, err := c.nc.QueueSubscribe(subject, c.names.Prefix()+"_coordinators", func(msg *nats.Msg) {
		var adv maxDeliveriesAdvisory
		if err := json.Unmarshal(msg.Data, &adv); err != nil {
			c.log.Warn("unreadable max-deliveries advisory", "error", err)
			return
		}
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			actx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			c.failExhausted(actx, adv)
		}()
	})
	if err != nil {
		return fmt.Errorf("subscribe to max-deliveries advisories: %w", err)
	}
	c.subs = append(c.subs, sub)
	return nil
}

func (c *Coordinator) failExhausted(ctx context.Context, adv maxDeliveriesAdvisory) {
	raw, err := c.calls.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			c.log.Warn("read exhausted call", "seq", adv.StreamSeq, "error", err)
		}
		return
	}
	var call messages.CallRequest
	if _, err := messages.Decode(messages.Header(raw.Header), raw.Data, &call); err != nil || call.CallID == "" {
		call.CallID = raw.Header.Get(messages.HeaderMsgID)
	}
	if messages.ValidateID("call ID", call.CallID) != nil {
		return
	}
	msg := fmt.Sprintf("the call was delivered %d times and no attempt finished: the workers that took it stopped, lost their lease, or do not serve the tool", adv.Deliveries)
	res := endResult(&call, messages.StateFailed, messages.ResultAttempts, msg)
	res.Attempt = int(adv.Deliveries)
	if _, err := c.ledger.Commit(ctx, &res, call.Notify); err != nil {
		c.log.Warn("could not fail exhausted call", "call", call.CallID, "error", err)
		return
	}
	if err := c.calls.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		c.log.Warn("could not remove exhausted call", "call", call.CallID, "error", err)
	}
}

func endResult(call *messages.CallRequest, status messages.CallState, code, message string) messages.CallResult {
	return messages.CallResult{
		CallID:     call.CallID,
		Tool:       call.Tool,
		Status:     status,
		IsError:    true,
		Content:    []messages.ContentBlock{messages.TextBlock(message)},
		Error:      &messages.ResultError{Code: code, Message: message},
		QueuedAt:   call.QueuedAt,
		FinishedAt: time.Now().UTC(),
	}
}

// sweepBatch bounds how many queued calls one sweep reads.
const sweepBatch = 4096

// sweepLoop ends queued calls whose deadline passed long ago: calls of a
// namespace that no worker serves would otherwise wait forever.
func (c *Coordinator) sweepLoop(ctx context.Context) {
	defer c.bg.Done()
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.sweep(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("sweep of expired calls failed", "error", err)
			}
			if err := c.sweepApprovals(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("sweep of approvals failed", "error", err)
			}
		}
	}
}

func (c *Coordinator) sweep(ctx context.Context) error {
	info, err := c.calls.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cutoff := time.Now().Add(-c.cfg.SweepGrace)
	return c.scanQueue(ctx, directGet{Seq: info.State.FirstSeq, NextFor: c.names.CallsSubjects(), Batch: sweepBatch}, func(seq uint64, msg *nats.Msg) bool {
		var call messages.CallRequest
		if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &call); err != nil || call.CallID == "" {
			return true
		}
		if call.Deadline.IsZero() || call.Deadline.After(cutoff) {
			return true
		}
		res := endResult(&call, messages.StateTimedOut, messages.ResultTimedOut, "the call's deadline passed and no worker finished it")
		if _, err := c.ledger.Commit(ctx, &res, call.Notify); err != nil {
			c.log.Warn("could not end expired call", "call", call.CallID, "error", err)
			return true
		}
		if err := c.calls.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			c.log.Warn("could not remove expired call", "call", call.CallID, "error", err)
		}
		return true
	})
}

// directGet is a batched direct-get request to the calls stream.
type directGet struct {
	Seq       uint64     `json:"seq,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	NextFor   string     `json:"next_by_subj"`
	Batch     int        `json:"batch"`
}

// scanQueue reads queued calls without consuming them, until each returns
// false or the batch ends.
func (c *Coordinator) scanQueue(ctx context.Context, req directGet, each func(uint64, *nats.Msg) bool) error {
	body, _ := json.Marshal(req)
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := c.nc.PublishRequest("$JS.API.DIRECT.GET."+c.names.CallsStream(), inbox, body); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	for {
		msg, err := sub.NextMsgWithContext(rctx)
		if err != nil {
			return err
		}
		if status := msg.Header.Get("Status"); status != "" && len(msg.Data) == 0 {
			return nil // end of batch, or nothing queued
		}
		seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			continue
		}
		if !each(seq, msg) {
			return nil
		}
	}
}
