package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// followCall follows a call until its result, in the form the output
// calls for: with --json every event as one line of JSON on standard
// output (printed reports that the result was among them); on a terminal
// a progress bar; otherwise one plain line per event on standard error.
// With cancelOnInterrupt the first Ctrl-C cancels the call and the watch
// goes on until the cancelled result.
func followCall(ctx context.Context, g globals, c *client.Client, callID string, cancelOnInterrupt bool) (res *messages.CallResult, printed bool, err error) {
	switch {
	case g.json:
		res, err = watchEvents(ctx, c, callID, cancelOnInterrupt, os.Stdout)
		return res, err == nil, err
	case interactive():
		res, err = watchCall(ctx, c, callID, cancelOnInterrupt)
		return res, false, err
	}
	res, err = watchLines(ctx, c, callID, cancelOnInterrupt, os.Stderr)
	return res, false, err
}

// interactive reports whether both standard output and standard error are
// terminals, where a progress bar can redraw itself. Anywhere else (a
// pipe, a file, a CI log) the bar's redraws would pile up.
func interactive() bool {
	return isTerminal(os.Stdout) && isTerminal(os.Stderr)
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// watchContext is the context of a watch. With cancelOnInterrupt, ctx
// ending (an interrupt) cancels the call, saying cancelling to say, and
// the watch outlives it so that the cancelled result can still be read;
// without, the watch ends with ctx, and the call goes on.
func watchContext(ctx context.Context, c *client.Client, callID string, cancelOnInterrupt bool, say io.Writer, cancelling string) (context.Context, context.CancelFunc) {
	if !cancelOnInterrupt {
		return context.WithCancel(ctx)
	}
	watchCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
			fmt.Fprintln(say, cancelling)
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Cancel(cctx, callID, "interrupted from the command line"); err != nil {
				fmt.Fprintln(say, "cancel failed:", err)
				stop()
			}
		case <-watchCtx.Done():
		}
	}()
	return watchCtx, stop
}

// watchEvents prints each event of the call as one line of JSON, the
// result's event last.
func watchEvents(ctx context.Context, c *client.Client, callID string, cancelOnInterrupt bool, out io.Writer) (*messages.CallResult, error) {
	watchCtx, stop := watchContext(ctx, c, callID, cancelOnInterrupt, os.Stderr, "cancelling…")
	defer stop()
	for ev, err := range c.Watch(watchCtx, callID) {
		if err != nil {
			return nil, err
		}
		line, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
		if ev.Kind == messages.EventApproval {
			// Standard output is for the JSON: who decides, and how, is
			// said on standard error.
			fmt.Fprintln(os.Stderr, eventLine(ev))
		}
		if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
			return nil, err
		}
		if ev.Kind == messages.EventResult {
			return ev.Result, nil
		}
	}
	return nil, errors.New("watch ended without a result")
}

// watchLines prints one plain line for each event of the call.
func watchLines(ctx context.Context, c *client.Client, callID string, cancelOnInterrupt bool, out io.Writer) (*messages.CallResult, error) {
	fmt.Fprintf(out, "call %s\n", callID)
	watchCtx, stop := watchContext(ctx, c, callID, cancelOnInterrupt, out, "cancelling…")
	defer stop()
	first := true
	for ev, err := range c.Watch(watchCtx, callID) {
		if err != nil {
			return nil, err
		}
		if ev.Kind == messages.EventQueued && first {
			first = false
			// A call held for an approval has a queued event that records
			// it, but it is not queued until approved: the approval's line,
			// next, says what it waits for.
			if info, err := c.Get(watchCtx, callID); err == nil && info.State == messages.StateAwaitingApproval {
				continue
			}
		}
		if line := eventLine(ev); line != "" {
			fmt.Fprintln(out, line)
		}
		if ev.Kind == messages.EventResult {
			return ev.Result, nil
		}
	}
	return nil, errors.New("watch ended without a result")
}

// eventLine describes an event in a line of text, or "" for none.
func eventLine(ev *messages.CallEvent) string {
	switch ev.Kind {
	case messages.EventQueued:
		return "queued"
	case messages.EventStarted:
		return fmt.Sprintf("running on %s (attempt %d)", ev.Worker, ev.Attempt)
	case messages.EventProgress:
		p := ev.Progress
		if p == nil {
			return ""
		}
		line := fmt.Sprintf("progress %g", p.Progress)
		if f := p.Fraction(); f >= 0 {
			line = fmt.Sprintf("progress %.0f%%", 100*f)
		}
		if p.Message != "" {
			line += " " + p.Message
		}
		return line
	case messages.EventLog:
		if ev.Log == nil {
			return ""
		}
		return fmt.Sprintf("[%s] %s", ev.Log.Level, ev.Log.Message)
	case messages.EventCancel:
		return "cancelling"
	case messages.EventApproval:
		if ev.Approval == nil || ev.Approval.State == messages.ApprovalPending {
			return approvalLine(ev.CallID, ev.Approval)
		}
		return decisionLine(ev.Approval)
	case messages.EventResult:
		if ev.Result == nil {
			return ""
		}
		if ev.Result.Error != nil {
			return fmt.Sprintf("%s (%s)", ev.Result.Status, ev.Result.Error.Code)
		}
		return string(ev.Result.Status)
	}
	return ""
}
