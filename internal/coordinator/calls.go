package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

func (c *Coordinator) getCall(ctx context.Context, req *request) (any, error) {
	var gr messages.GetCallRequest
	if err := req.decode(&gr); err != nil {
		return nil, err
	}
	if err := messages.ValidateID("call ID", gr.CallID); err != nil {
		return nil, err
	}
	snap, err := c.ledger.Snapshot(ctx, gr.CallID)
	if err != nil {
		return nil, err
	}
	if !snap.Exists() {
		return nil, messages.Errorf(messages.CodeCallNotFound, "no call %s (calls are kept for %v)", gr.CallID, c.cfg.Resources.WithDefaults().EventsMaxAge)
	}
	info := snap.Info()
	return &info, nil
}

func (c *Coordinator) cancelCall(ctx context.Context, req *request) (any, error) {
	var cr messages.CancelRequest
	if err := req.decode(&cr); err != nil {
		return nil, err
	}
	return c.Cancel(ctx, &cr)
}

// Cancel cancels a call (the calls.cancel endpoint). A queued call is
// removed from the queue and gets its cancelled result here; a running call
// gets a durable cancel record and a signal to its worker, which writes the
// result; a finished call keeps its result.
func (c *Coordinator) Cancel(ctx context.Context, cr *messages.CancelRequest) (*messages.CancelReply, error) {
	if err := messages.ValidateID("call ID", cr.CallID); err != nil {
		return nil, err
	}
	info := &messages.CancelInfo{Reason: cr.Reason, By: cr.By}
	if info.Reason == "" {
		info.Reason = "cancelled by request"
	}
	for range 10 {
		snap, err := c.ledger.Snapshot(ctx, cr.CallID)
		if err != nil {
			return nil, err
		}
		if !snap.Exists() {
			return nil, messages.Errorf(messages.CodeCallNotFound, "no call %s", cr.CallID)
		}
		reply := &messages.CancelReply{CallID: cr.CallID}
		switch {
		case snap.Result != nil:
			reply.Outcome, reply.State, reply.Result = messages.CancelTooLate, snap.State(), snap.Result.Result
			return reply, nil
		case snap.Started == nil:
			res := c.cancelledResult(snap, info)
			notify := ""
			if snap.Queued != nil && snap.Queued.Request != nil {
				notify = snap.Queued.Request.Notify
			}
			err := c.ledger.CommitIfUnchanged(ctx, &res, snap.LastSeq, notify)
			if errors.Is(err, ledger.ErrChanged) {
				continue // a worker started it meanwhile
			}
			if err != nil {
				return nil, err
			}
			c.removeQueued(ctx, snap)
			// A worker may have just taken the call without having recorded
			// its start yet: it stops the tool on the signal.
			c.signalCancel(snap, info)
			reply.Outcome, reply.State, reply.Result = messages.CancelDone, messages.StateCancelled, &res
			return reply, nil
		default:
			if snap.Cancel == nil {
				if _, err := c.ledger.Append(ctx, &messages.CallEvent{CallID: cr.CallID, Kind: messages.EventCancel, Time: time.Now().UTC(), Cancel: info}); err != nil {
					return nil, err
				}
			}
			c.signalCancel(snap, info)
			reply.Outcome, reply.State = messages.CancelSignalled, messages.StateRunning
			return reply, nil
		}
	}
	return nil, messages.Errorf(messages.CodeConflict, "call %s kept changing; try again", cr.CallID)
}

// signalCancel tells the worker that holds the call, if any, to stop it.
func (c *Coordinator) signalCancel(snap *ledger.Snapshot, info *messages.CancelInfo) {
	if snap.Queued == nil || snap.Queued.Request == nil {
		return
	}
	subject, err := c.names.CancelSubject(snap.Queued.Request.Namespace, snap.CallID)
	if err != nil {
		return
	}
	if msg, err := newMsg(subject, info); err == nil {
		_ = c.nc.PublishMsg(msg)
	}
}

func (c *Coordinator) cancelledResult(snap *ledger.Snapshot, info *messages.CancelInfo) messages.CallResult {
	res := messages.CallResult{
		CallID:     snap.CallID,
		Status:     messages.StateCancelled,
		IsError:    true,
		Content:    []messages.ContentBlock{messages.TextBlock("the call was cancelled before it started: " + info.Reason)},
		Error:      &messages.ResultError{Code: messages.ResultCancelled, Message: info.Reason},
		FinishedAt: time.Now().UTC(),
	}
	if q := snap.Queued; q != nil && q.Request != nil {
		res.Tool, res.QueuedAt = q.Request.Tool, q.Request.QueuedAt
	}
	return res
}

// removeQueued deletes a call that no worker will run from the calls
// stream. A worker that fetched it meanwhile finds its result and drops it.
func (c *Coordinator) removeQueued(ctx context.Context, snap *ledger.Snapshot) {
	if snap.Queued == nil || snap.Queued.Request == nil {
		return
	}
	seq, err := c.findQueued(ctx, snap.Queued.Request)
	if err != nil {
		c.log.Warn("could not find a cancelled call in the queue", "call", snap.CallID, "error", err)
		return
	}
	if seq == 0 {
		return // a worker took it meanwhile
	}
	if err := c.calls.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		c.log.Warn("could not remove a cancelled call from the queue", "call", snap.CallID, "seq", seq, "error", err)
	}
}

// clockSlack allows for clocks of coordinators and servers that differ.
const clockSlack = 5 * time.Second

// findQueued returns the sequence of a call in the calls stream, or 0 if
// it is not there. It reads the tool's queue from shortly before the call
// was queued, so it touches few messages however long the queue is.
func (c *Coordinator) findQueued(ctx context.Context, call *messages.CallRequest) (uint64, error) {
	subject, err := c.names.CallSubject(call.ToolName())
	if err != nil {
		return 0, err
	}
	from := call.QueuedAt.Add(-clockSlack)
	var found uint64
	err = c.scanQueue(ctx, directGet{StartTime: &from, NextFor: subject, Batch: 1024}, func(seq uint64, msg *nats.Msg) bool {
		if msg.Header.Get(messages.HeaderMsgID) == call.CallID {
			found = seq
			return false
		}
		ts, err := time.Parse(time.RFC3339Nano, msg.Header.Get(jetstream.TimeStampHeaer))
		return err != nil || ts.Before(call.QueuedAt.Add(clockSlack))
	})
	return found, err
}

func (c *Coordinator) getTurn(ctx context.Context, req *request) (any, error) {
	var tr messages.GetTurnRequest
	if err := req.decode(&tr); err != nil {
		return nil, err
	}
	return c.Turn(ctx, tr.Turn)
}

// Turn returns a turn's calls with their states and results, oldest first.
func (c *Coordinator) Turn(ctx context.Context, turn string) (*messages.TurnInfo, error) {
	filter, err := messages.TurnCallsFilter(turn)
	if err != nil {
		return nil, err
	}
	lister, err := c.turns.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list calls of turn %s: %w", turn, err)
	}
	var ids []string
	// The lister stops itself after the last key.
	for key := range lister.Keys() {
		ids = append(ids, key[strings.LastIndexByte(key, '.')+1:])
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, messages.Errorf(messages.CodeTurnNotFound, "turn %s has no calls", turn)
	}
	snaps, err := c.ledger.Snapshots(ctx, ids...)
	if err != nil {
		return nil, err
	}
	out := &messages.TurnInfo{Turn: turn}
	for _, id := range ids {
		if s := snaps[id]; s != nil && s.Exists() {
			out.Calls = append(out.Calls, s.Info())
		}
	}
	slices.SortFunc(out.Calls, func(a, b messages.CallInfo) int {
		if d := a.QueuedAt.Compare(b.QueuedAt); d != 0 {
			return d
		}
		return strings.Compare(a.CallID, b.CallID)
	})
	return out, nil
}
