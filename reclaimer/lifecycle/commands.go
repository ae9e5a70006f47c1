package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// unsnooze looks at a snoozed reclaim once its silence has ended: if the
// alert still fires, the cycle starts again with a new warning and grace.
func (e *Engine) unsnooze(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.State != reclaim.Snoozed || e.o.Checker == nil {
		return
	}
	v := e.verdict(ctx, r)
	if _, _, err := e.apply(id, v); err != nil {
		e.o.Logger.Error("recording a verdict on a snooze that ended", "reclaim", id, "do", v.Do, "err", err)
	}
}

// Restore undoes a scale-down or a stop, once.
func (e *Engine) Restore(ctx context.Context, id, by string) (*reclaim.Reclaim, error) {
	return e.restore(ctx, id, by)
}

func (e *Engine) restore(ctx context.Context, id, by string) (*reclaim.Reclaim, error) {
	r := e.snapshot(id)
	if r == nil {
		return nil, fmt.Errorf("no reclaim %s", id)
	}
	// Done, or not released with its stop still in place (or restored since).
	stopped := r.State == reclaim.Done || (r.State == reclaim.NotReleased && (r.StopInPlace || r.Restore != nil))
	if r.Stopped == nil || !stopped {
		return nil, reclaim.ErrNotRestorable
	}
	rs := e.o.Restorer
	if rs == nil {
		return nil, reclaim.ErrNotRestorable
	}
	// One restore per reclaim: the first asker claims it in the store, so
	// a button, the API and restore_when pressed at once restore once.
	now := e.now()
	claimed := false
	r, err := e.update(id, nil, func(c *reclaim.Reclaim) bool {
		if !c.Restorable() {
			return false
		}
		c.Restore, claimed = &reclaim.Restore{AskedAt: now, AskedBy: by, Deadline: now.Add(e.o.Config.Release.TimeoutFor(c.ReleaseKind()))}, true
		return true
	})
	if err != nil || !claimed {
		return r, err // asked before: nothing twice
	}
	if err := e.fenced(reclaim.FencedAction); err != nil {
		return nil, err
	}
	if err := rs.Restore(ctx, r); err != nil {
		e.o.Metrics.Error(reclaim.ComponentKubernetes)
		if _, uerr := e.update(id, nil, func(c *reclaim.Reclaim) bool {
			c.Restore = nil
			return true
		}); uerr != nil {
			e.o.Logger.Error("recording a restore that failed", "reclaim", id, "err", uerr)
		}
		return nil, err
	}
	if _, err := e.update(id, func(c *reclaim.Reclaim) []reclaim.Event {
		return []reclaim.Event{e.event(c, "restore_asked", c.Stopped.RestoredText(), by)}
	}, func(c *reclaim.Reclaim) bool { c.StopInPlace = false; return true }); err != nil {
		return nil, err
	}
	e.verifyRestore(ctx, r)
	return e.snapshot(id), nil
}

// ErrNotPending says a reclaim has moved on and the request no longer applies.
var ErrNotPending = errors.New("the reclaim is no longer pending")

// Snooze holds a pending reclaim until a silence ends; when it ends and
// the unit is still idle, the cycle starts again.
func (e *Engine) Snooze(ctx context.Context, id, by string, until time.Time, silence string) (*reclaim.Reclaim, error) {
	r, applied, err := e.apply(id, Verdict{Do: DoSnooze, By: by, Until: until, SilenceID: silence, Decision: reclaim.DecisionSnoozed})
	if err != nil || !applied {
		return r, cmp.Or(err, ErrNotPending)
	}
	e.send(ctx, reclaim.Message{Kind: reclaim.MsgSnoozed, Reclaim: r, By: by, Text: fmt.Sprintf("%s snoozed the reclaim of %s until %s.", by, r.Target.Unit(), until.UTC().Format(time.RFC3339))}, nil)
	return r, nil
}

// Keep exempts a reclaim for good: a silence covers the workload until it ends.
func (e *Engine) Keep(ctx context.Context, id, by string, until time.Time, silence string) (*reclaim.Reclaim, error) {
	r, applied, err := e.apply(id, Verdict{Do: DoKeep, By: by, Until: until, SilenceID: silence, Decision: reclaim.DecisionKept})
	if err != nil || !applied {
		return r, cmp.Or(err, ErrNotPending)
	}
	e.send(ctx, reclaim.Message{Kind: reclaim.MsgKept, Reclaim: r, By: by, Text: fmt.Sprintf("%s keeps %s until the workload ends.", by, r.Target.Unit())}, nil)
	return r, nil
}

// ReleaseNow acts at once at the owner's request: the grace, the minimum
// runtime and the schedule windows no longer apply.
func (e *Engine) ReleaseNow(ctx context.Context, id, by string) (*reclaim.Reclaim, error) {
	r, applied, err := e.apply(id, Verdict{Do: DoReleaseNow, By: by})
	if err != nil || !applied {
		return r, cmp.Or(err, ErrNotPending)
	}
	e.send(ctx, reclaim.Message{Kind: reclaim.MsgReleased, Reclaim: r, By: by, Text: fmt.Sprintf("%s released %s: reclaiming now.", by, r.Target.Unit())}, nil)
	e.Kick()
	return r, nil
}
