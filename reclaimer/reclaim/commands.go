package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// snooze holds a reclaim while its alert is silenced or inhibited.
func (e *Engine) snooze(id string, v Verdict) {
	chk := v.Silence
	_, err := e.update(id, func(c *Reclaim) []Event { return []Event{e.event(c, "snoozed", chk.Reason, "")} }, func(c *Reclaim) bool {
		if c.State != Pending && c.State != Acting && c.State != Snoozed {
			return false
		}
		c.State, c.Reason = Snoozed, v.Why
		if c.Snooze == nil { // c is a clone: its Snooze is its own
			c.Snooze = &Snooze{}
		}
		c.Snooze.Until, c.NextTry = chk.Until, chk.Until
		if chk.Until.IsZero() {
			c.NextTry = e.now().Add(inhibitedWait)
		}
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording a snooze", "reclaim", id, "err", err)
	}
}

// unsnooze looks at a snoozed reclaim once its silence has ended: if the
// alert still fires, the cycle starts again with a new warning and grace.
func (e *Engine) unsnooze(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.State != Snoozed || e.o.Checker == nil {
		return
	}
	v := e.verdict(ctx, r)
	if v.Decision != "" {
		e.o.Metrics.decide(v.Decision)
	}
	switch v.Do {
	case DoWait:
		if _, err := e.update(id, nil, func(c *Reclaim) bool { c.NextTry = v.Until; return true }); err != nil {
			e.o.Logger.Error("recording when to look at a snooze again", "reclaim", id, "err", err)
		}
	case DoSnooze:
		e.snooze(id, v)
	case DoCancel:
		e.finish(id, Cancelled, v.Why, nil)
	case DoWarn:
		_, err := e.update(id, func(c *Reclaim) []Event {
			return []Event{e.event(c, "unsnoozed", "the snooze ended and the unit is still idle", "reclaimer")}
		}, func(c *Reclaim) bool {
			if c.State != Snoozed {
				return false
			}
			c.State, c.ActAt, c.NextTry = Pending, e.now().Add(v.Grace), time.Time{}
			c.Reason = v.Why
			c.Warning = Delivery{Refs: c.Warning.Refs}
			c.WarningRound++
			for k := range c.Warning.Refs {
				if isSentKey(k) {
					delete(c.Warning.Refs, k) // a new warning is due; its message refs stay for updates
				}
			}
			return true
		})
		if err != nil {
			e.o.Logger.Error("reopening a snoozed reclaim", "reclaim", id, "err", err)
		}
	}
}

// Restorer undoes a scale-down.
type Restorer interface {
	Restore(ctx context.Context, r *Reclaim) error
}

// ErrNotRestorable says a reclaim has nothing to restore.
var ErrNotRestorable = errors.New("nothing to restore: only a scale-down or stop that is done, or still in place after not_released, can be restored")

// Restore undoes a scale-down or a stop, once.
func (e *Engine) Restore(ctx context.Context, id, by string) (*Reclaim, error) {
	return e.restore(ctx, id, by)
}

func (e *Engine) restore(ctx context.Context, id, by string) (*Reclaim, error) {
	r := e.snapshot(id)
	if r == nil {
		return nil, fmt.Errorf("no reclaim %s", id)
	}
	// Done, or not released with its stop still in place (or restored since).
	stopped := r.State == Done || (r.State == NotReleased && (r.StopInPlace || r.Restore != nil))
	if r.Stopped == nil || !stopped {
		return nil, ErrNotRestorable
	}
	rs := e.o.Restorer
	if rs == nil {
		return nil, ErrNotRestorable
	}
	// One restore per reclaim: the first asker claims it in the store, so
	// a button, the API and restore_when pressed at once restore once.
	now := e.now()
	claimed := false
	r, err := e.update(id, nil, func(c *Reclaim) bool {
		if !c.Restorable() {
			return false
		}
		c.Restore, claimed = &Restore{AskedAt: now, AskedBy: by, Deadline: now.Add(e.o.Config.Release.TimeoutFor(c.ReleaseKind()))}, true
		return true
	})
	if err != nil || !claimed {
		return r, err // asked before: nothing twice
	}
	if err := e.fenced(FencedAction); err != nil {
		return nil, err
	}
	if err := rs.Restore(ctx, r); err != nil {
		e.o.Metrics.Error(ComponentKubernetes)
		if _, uerr := e.update(id, nil, func(c *Reclaim) bool {
			c.Restore = nil
			return true
		}); uerr != nil {
			e.o.Logger.Error("recording a restore that failed", "reclaim", id, "err", uerr)
		}
		return nil, err
	}
	if _, err := e.update(id, func(c *Reclaim) []Event {
		return []Event{e.event(c, "restore_asked", c.Stopped.RestoredText(), by)}
	}, func(c *Reclaim) bool { c.StopInPlace = false; return true }); err != nil {
		return nil, err
	}
	e.verifyRestore(ctx, r)
	return e.snapshot(id), nil
}

// ErrNotPending says a reclaim has moved on and the request no longer applies.
var ErrNotPending = errors.New("the reclaim is no longer pending")

// Snooze holds a pending reclaim until a silence ends; when it ends and
// the unit is still idle, the cycle starts again.
func (e *Engine) Snooze(ctx context.Context, id, by string, until time.Time, silence string) (*Reclaim, error) {
	r, err := e.update(id, func(c *Reclaim) []Event {
		return []Event{e.event(c, "snoozed", "until "+until.UTC().Format(time.RFC3339)+", silence "+silence, by)}
	}, func(c *Reclaim) bool {
		if c.State != Pending && c.State != Snoozed {
			return false
		}
		c.State, c.Snooze = Snoozed, &Snooze{Silence: silence, By: by, Until: until}
		c.NextTry, c.Reason = until, "snoozed by "+by+" until "+until.UTC().Format(time.RFC3339)
		return true
	})
	if err != nil {
		return nil, err
	}
	if r.State != Snoozed || r.Snooze == nil || r.Snooze.Silence != silence {
		return r, ErrNotPending
	}
	e.o.Metrics.decide(DecisionSnoozed)
	e.send(ctx, Message{Kind: MsgSnoozed, Reclaim: r, By: by, Text: fmt.Sprintf("%s snoozed the reclaim of %s until %s.", by, r.Target.Unit(), until.UTC().Format(time.RFC3339))}, nil)
	return r, nil
}

// Keep exempts a reclaim for good: a silence covers the workload until it ends.
func (e *Engine) Keep(ctx context.Context, id, by string, until time.Time, silence string) (*Reclaim, error) {
	r, err := e.update(id, func(c *Reclaim) []Event {
		return []Event{e.event(c, "kept", "silence "+silence+" until the workload ends (at most "+until.UTC().Format(time.RFC3339)+")", by)}
	}, func(c *Reclaim) bool {
		if c.State != Pending && c.State != Snoozed {
			return false
		}
		c.State, c.Reason, c.Closed = Exempt, "kept by "+by, e.now()
		c.Snooze = &Snooze{Silence: silence, By: by, Until: until}
		c.Final.Sent = true // the kept message says it all
		return true
	})
	if err != nil {
		return nil, err
	}
	if r.State != Exempt || r.Snooze == nil || r.Snooze.Silence != silence {
		return r, ErrNotPending
	}
	e.o.Metrics.decide(DecisionKept)
	e.send(ctx, Message{Kind: MsgKept, Reclaim: r, By: by, Text: fmt.Sprintf("%s keeps %s until the workload ends.", by, r.Target.Unit())}, nil)
	return r, nil
}

// ReleaseNow acts at once at the owner's request: the grace, the minimum
// runtime and the schedule windows no longer apply.
func (e *Engine) ReleaseNow(ctx context.Context, id, by string) (*Reclaim, error) {
	r, err := e.update(id, func(c *Reclaim) []Event { return []Event{e.event(c, "released", "by the owner: acting now", by)} }, func(c *Reclaim) bool {
		if c.State != Pending && c.State != Snoozed {
			return false
		}
		c.State, c.ActAt, c.NextTry, c.ReleaseAskedBy = Pending, e.now(), time.Time{}, by
		c.Warning.Sent = true // the owner pressed the button on it
		c.Reason = "released by " + by + ": acting now"
		return true
	})
	if err != nil {
		return nil, err
	}
	if r.ReleaseAskedBy != by || r.State != Pending {
		return r, ErrNotPending
	}
	e.send(ctx, Message{Kind: MsgReleased, Reclaim: r, By: by, Text: fmt.Sprintf("%s released %s: reclaiming now.", by, r.Target.Unit())}, nil)
	e.Kick()
	return r, nil
}
