package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

func (e *Engine) policy(r *reclaim.Reclaim) *config.Policy { return e.o.Config.Policy(r.Policy) }

// checks decides on a warned reclaim whose action is due, and records a
// verdict other than acting. It says whether the action may go.
func (e *Engine) checks(ctx context.Context, r *reclaim.Reclaim) bool {
	if !r.Warning.Sent {
		return false
	}
	v := e.verdict(ctx, r)
	if v.Do == DoAct {
		return true // the action's result is what is counted
	}
	if _, _, err := e.apply(r.ID, v); err != nil {
		e.o.Logger.Error("recording a verdict on a due action", "reclaim", r.ID, "do", v.Do, "err", err)
	}
	return false
}

func (e *Engine) act(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.State.Terminal() {
		return
	}
	if r.State == reclaim.Acting && !r.ReleaseBy.IsZero() {
		e.verify(ctx, r)
		return
	}
	// An action that began and has no recorded outcome (the reclaimer
	// stopped during it) may have taken effect: the checks passed then, and
	// checking again now would judge its own effect (the pod gone, the GPU
	// free, the alert resolved) as a reason to cancel. The action is run
	// again, which every action allows, and its outcome recorded.
	resumed := r.State == reclaim.Acting && !r.ActingSince.IsZero()
	if !resumed && !e.checks(ctx, r) {
		return
	}
	// What the action will end is written with the decision (a kill's
	// PIDs), so that after a restart the record says what was done.
	var planned reclaim.Plan
	if p := e.o.Planner; p != nil && !resumed && !r.DryRun {
		var err error
		planned, err = p.Plan(ctx, r.Action, r)
		if err != nil && !errors.Is(err, reclaim.ErrGone) {
			e.o.Logger.Warn("looking up what the action will end", "reclaim", id, "err", err)
		}
	}
	// The decision is written before it is carried out.
	r, err := e.update(id, func(c *reclaim.Reclaim) []reclaim.Event {
		return []reclaim.Event{e.event(c, "acting", string(c.Action), "reclaimer")}
	}, func(c *reclaim.Reclaim) bool {
		if c.State.Terminal() {
			return false
		}
		c.State, c.Attempts, c.Reason = reclaim.Acting, c.Attempts+1, "acting: "+string(c.Action)
		if c.ActingSince.IsZero() {
			c.ActingSince = e.now()
		}
		if planned.PIDs != nil {
			c.Planned = planned.PIDs
		}
		if planned.Pods != nil {
			c.HeldBy = planned.Pods
		}
		return true
	})
	if err != nil || r.State != reclaim.Acting {
		return
	}
	e.o.Failpoint("before-action")
	now := e.now()
	if r.DryRun {
		e.o.Logger.Info("dry run: would reclaim", "reclaim", id, "action", r.Action, "owner", r.Target.Holder(), "unit", r.Target.Unit())
		e.o.Metrics.action(r.Action, reclaim.ActionDryRun)
		e.finish(id, reclaim.DryRun, fmt.Sprintf("dry run: would have run %s", r.Action))
		return
	}
	if e.fenced(reclaim.FencedAction) != nil {
		return // the next leader resumes it, as after a crash
	}
	start := time.Now()
	res, err := e.o.Actor.Act(ctx, r.Action, r)
	e.o.Metrics.actionDuration.WithLabelValues(string(r.Action)).Observe(time.Since(start).Seconds())
	e.o.Failpoint("after-action")
	var refused *reclaim.RefusedError
	var retry *reclaim.RetryError
	switch {
	case errors.Is(err, reclaim.ErrNotLeader):
		// The actor found leadership in doubt before it acted: nothing was
		// done, and the next leader resumes it, as after a crash.
		e.o.Metrics.fenced.WithLabelValues(string(reclaim.FencedAction)).Inc()
		e.o.Logger.Warn("refused: leadership in doubt", "what", reclaim.FencedAction, "reclaim", id, "err", err)
	case err == nil || errors.Is(err, reclaim.ErrGone):
		// acted_at is when the node or the API confirmed the action; a target
		// found gone when an action begun before a restart is run again
		// went at the earliest when that one began.
		result, detail, at := reclaim.ActionDone, res.Detail, e.now()
		switch {
		case err != nil && resumed:
			at = r.ActingSince
			result, detail = reclaim.ActionGone, "the target is gone: the action begun before the reclaimer restarted took effect (or it left on its own)"
			if len(r.Planned) > 0 {
				res.Killed = r.Planned
				detail = fmt.Sprintf("processes %v are gone: the kill begun before the reclaimer restarted took effect (or they ended on their own)", r.Planned)
			}
		case err != nil:
			result, detail = reclaim.ActionGone, "the target was already gone"
		}
		// Counted once, when the release is decided (verify): done, gone or
		// not released.
		res.Detail = detail
		e.carriedOut(ctx, id, &res, at, result == reclaim.ActionGone)
	case errors.As(err, &refused):
		e.o.Metrics.action(r.Action, reclaim.ActionRefused)
		if _, _, err := e.apply(id, Verdict{Do: DoCancel, Why: refused.Reason}); err != nil {
			e.o.Logger.Error("recording a refused action", "reclaim", id, "err", err)
		}
	case errors.As(err, &retry) && r.Attempts < actionAttemptsRetryable:
		e.o.Metrics.action(r.Action, reclaim.ActionRetry)
		e.deferTo(id, now.Add(retry.After), "will try again: "+err.Error())
		e.recordError(id, err)
	case r.Attempts < actionAttemptsUnknown && retry == nil:
		e.o.Metrics.action(r.Action, reclaim.ActionRetry)
		e.o.Metrics.Error(reclaim.ComponentAction)
		e.deferTo(id, now.Add(backoff(r.Attempts)), "will try again: "+err.Error())
		e.recordError(id, err)
	default:
		e.o.Metrics.action(r.Action, reclaim.ActionFailed)
		e.o.Metrics.Error(reclaim.ComponentAction)
		e.finish(id, reclaim.Failed, err.Error())
	}
}

// recordError records an action that did not take effect: the next
// attempt checks everything again.
func (e *Engine) recordError(id string, err error) {
	if _, uerr := e.update(id, nil, func(c *reclaim.Reclaim) bool { c.LastError, c.ActingSince = err.Error(), time.Time{}; return true }); uerr != nil {
		e.o.Logger.Error("recording an action's error", "reclaim", id, "err", uerr)
	}
}

// finish ends a reclaim on an action's outcome that no verdict gives
// (failed, a dry run).
func (e *Engine) finish(id string, st reclaim.State, why string) {
	r, err := e.update(id, func(c *reclaim.Reclaim) []reclaim.Event {
		return []reclaim.Event{e.event(c, string(st), why, "reclaimer")}
	}, func(c *reclaim.Reclaim) bool {
		if c.State.Terminal() {
			return false
		}
		end(c, st, why, e.now())
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording the end of a reclaim", "reclaim", id, "err", err)
		return
	}
	e.o.Logger.Info("reclaim "+string(st), "reclaim", id, "reason", why, "unit", r.Target.Unit(), "owner", r.Target.Holder())
}

func (e *Engine) final(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.Final.Sent {
		return
	}
	var kind reclaim.MessageKind
	switch r.State {
	case reclaim.Done:
		kind = reclaim.MsgReclaimed
	case reclaim.NotReleased:
		kind = reclaim.MsgNotReleased
	case reclaim.Cancelled:
		kind = reclaim.MsgCancelled
	case reclaim.Failed:
		kind = reclaim.MsgFailed
	case reclaim.DryRun:
		kind = reclaim.MsgAdmin
	default:
		if _, err := e.update(id, nil, func(c *reclaim.Reclaim) bool { c.Final.Sent = true; return true }); err != nil {
			e.o.Logger.Error("recording that nothing is left to tell", "reclaim", id, "err", err)
		}
		return
	}
	d := e.delivery(id, kind, r.Final)
	again, ok := e.intent(id, &d, func(c *reclaim.Reclaim) *reclaim.Delivery { return &c.Final })
	if !ok {
		return
	}
	e.o.Failpoint("before-final")
	delivered := e.send(ctx, reclaim.Message{Kind: kind, Reclaim: r, Text: text(kind, r), Again: again}, &d)
	d.Attempts++
	_, err := e.update(id, nil, func(c *reclaim.Reclaim) bool {
		c.Final = d
		if delivered || d.Attempts >= finalMessageAttempts {
			c.Final.Sent, c.Final.At = true, e.now()
		} else {
			c.NextTry = e.now().Add(backoff(d.Attempts))
		}
		return true
	})
	e.recorded(id, kind, d, err)
	if err != nil {
		e.o.Logger.Error("recording a final message", "reclaim", id, "err", err)
		return
	}
	if e.o.Events != nil {
		switch r.State {
		case reclaim.Done:
			e.kubeEvent(ctx, r, "GPUReclaimed", fmt.Sprintf("%s reclaimed (%s): %s", r.Target.Unit(), r.ActionText(), r.Detail))
		case reclaim.NotReleased:
			e.kubeEvent(ctx, r, "GPUNotReleased", r.Reason)
		case reclaim.Cancelled:
			e.kubeEvent(ctx, r, "GPUReclaimCancelled", "reclaim cancelled: "+r.Reason)
		}
	}
}
