package coordinator

import (
	"context"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus/internal/wire/usage"
	"github.com/toolbus/toolbus/pkg/messages"
)

// learning answers the operators' requests about discovery's learning
// from use (learning.status, learning.enable, learning.disable,
// learning.reset); the recorder (nil when the coordinator records none)
// records the evidence of searches and calls.
type learning struct {
	store    *usage.Store
	recorder *usage.Recorder
	// retention and turnWindow are what the recorder keeps evidence and
	// turns' searches for.
	retention, turnWindow time.Duration
	log                   *slog.Logger
}

func (l *learning) status(ctx context.Context, r *messages.LearningStatusRequest) (*messages.LearningStatus, error) {
	set, err := l.store.Settings(ctx)
	if err != nil {
		return nil, unavailable(err, "read the learning switch")
	}
	out := &messages.LearningStatus{
		Enabled:      !set.Disabled,
		Recording:    l.recorder != nil,
		Reason:       set.Reason,
		By:           set.By,
		ChangedAt:    set.At,
		RetentionMS:  l.retention.Milliseconds(),
		TurnWindowMS: l.turnWindow.Milliseconds(),
	}
	if out.Tools, out.Records, err = l.store.Count(ctx); err != nil {
		return nil, unavailable(err, "count usage evidence")
	}
	if r.Tool != "" {
		name, err := messages.ParseToolName(r.Tool)
		if err != nil {
			return nil, err
		}
		ev, err := l.store.Tool(ctx, name)
		if err != nil {
			return nil, unavailable(err, "read the usage evidence of %s", name)
		}
		tl := &messages.ToolLearning{Tool: name.String(), Agents: ev.Agents, Users: ev.Users, Turns: ev.Turns, LastAt: ev.Last, Learned: []messages.LearnedTerm{}}
		if !set.Disabled {
			for _, lt := range ev.Learned {
				tl.Learned = append(tl.Learned, messages.LearnedTerm{Term: lt.Term, Count: int(lt.Count)})
			}
		}
		out.Tool = tl
	}
	return out, nil
}

func (l *learning) enable(ctx context.Context, r *messages.LearningSwitchRequest) (*messages.LearningStatus, error) {
	return l.set(ctx, r, false)
}

func (l *learning) disable(ctx context.Context, r *messages.LearningSwitchRequest) (*messages.LearningStatus, error) {
	if r.Reason == "" {
		return nil, messages.Errorf(messages.CodeBadRequest, "reason is required to switch learning off")
	}
	return l.set(ctx, r, true)
}

func (l *learning) set(ctx context.Context, r *messages.LearningSwitchRequest, off bool) (*messages.LearningStatus, error) {
	if err := l.store.SetSettings(ctx, usage.Settings{Disabled: off, Reason: r.Reason, By: r.By, At: time.Now().UTC()}); err != nil {
		return nil, unavailable(err, "switch learning")
	}
	// The other coordinators follow the switch; this one knows at once.
	if l.recorder != nil {
		l.recorder.SetEnabled(!off)
	}
	l.log.Info("learning from use switched", "on", !off, "by", r.By, "reason", r.Reason)
	return l.status(ctx, &messages.LearningStatusRequest{})
}

func (l *learning) reset(ctx context.Context, r *messages.LearningResetRequest) (*messages.LearningResetReply, error) {
	filter := usage.ToolsFilter
	if r.Tool != "" {
		name, err := messages.ParseToolName(r.Tool)
		if err != nil {
			return nil, err
		}
		filter = usage.ToolFilter(name)
	}
	n, err := l.store.Reset(ctx, filter)
	l.log.Info("usage evidence deleted", "tool", r.Tool, "all", r.All, "by", r.By, "records", n)
	if err != nil {
		return nil, unavailable(err, "delete usage evidence")
	}
	return &messages.LearningResetReply{Deleted: n}, nil
}
