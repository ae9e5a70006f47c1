package lifecycle

import (
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Where a verdict takes a reclaim is written once: transition, a pure
// function of the record, the verdict (decide's, or a person's) and the
// time. The engine's step is verdict → transition → persist (apply) →
// effect (a message, the action, a count), and nothing else writes a
// verdict into a record.

// transition returns the record that follows r under v at now, and the
// audit events that say so. It returns nil when v does not apply where r
// stands (another step moved it on since the verdict was taken): nothing
// is written.
func transition(r *reclaim.Reclaim, v Verdict, now time.Time) (*reclaim.Reclaim, []reclaim.Event) {
	c := r.Clone()
	if r.State == "" {
		return arrive(c, v, now)
	}
	event := func(kind, detail, actor string) []reclaim.Event {
		return []reclaim.Event{newEvent(c, now, kind, detail, actor)}
	}
	person := v.By != ""
	switch v.Do {
	case DoExempt:
		// Before the warning; a keep mark found then wins over a release
		// pressed meanwhile.
		if r.State != reclaim.Pending {
			return nil, nil
		}
		exempt(c, v.Why, now)
		return c, event("exempt", v.Why, "policy")

	case DoNotify:
		if r.State != reclaim.Pending {
			return nil, nil // a top owner that cannot be stopped is told, released or not
		}
		c.TopOwner = v.TopOwner
		c.State, c.Closed, c.Final.Sent, c.Reason = reclaim.Notified, now, true, v.Why
		return c, event("decided", "notify: "+v.Why, "policy")

	case DoWarn:
		switch r.State {
		case reclaim.Pending:
			// Recorded even if a release was pressed meanwhile: the action
			// is on the top owner either way.
			if v.TopOwner == nil {
				return nil, nil // no top owner looked up: the warning goes as the record says
			}
			c.TopOwner, c.Action = v.TopOwner, v.Action
			c.Reason = "warning the owner; " + c.ActionText() + " after the grace period"
			if v.Action == r.Action && v.TopOwner.Kind == "" {
				return c, nil // a bare pod, evicted as decided
			}
			return c, event("decided", fmt.Sprintf("%s on the top owner, %s", v.Action, v.TopOwner), "policy")
		case reclaim.Snoozed:
			// The snooze is over and the unit still idle: a new warning,
			// and a new grace from it.
			c.State, c.ActAt, c.NextTry, c.Reason = reclaim.Pending, now.Add(v.Grace), time.Time{}, v.Why
			c.Warning = reclaim.Delivery{Refs: c.Warning.Refs}
			c.WarningRound++
			for k := range c.Warning.Refs {
				if isSentKey(k) {
					delete(c.Warning.Refs, k) // a new warning is due; its message refs stay for updates
				}
			}
			return c, event("unsnoozed", "the snooze ended and the unit is still idle", "reclaimer")
		}
		return nil, nil

	case DoWait:
		switch {
		case r.State == reclaim.Pending && r.Warning.Sent:
			// Warned and due: the action is due later, and the record (the
			// status page, kubectl's Act At) says when.
			c.ActAt, c.Reason = v.Until, v.Why
		case r.State == reclaim.Pending || r.State == reclaim.Acting:
			c.NextTry, c.Reason = v.Until, v.Why
		case r.State == reclaim.Snoozed:
			c.NextTry = v.Until // the snooze's reason stands
		default:
			return nil, nil
		}
		return c, nil

	case DoCancel:
		if r.State.Terminal() {
			return nil, nil
		}
		end(c, reclaim.Cancelled, v.Why, now)
		return c, event(string(reclaim.Cancelled), v.Why, actor(v))

	case DoSnooze:
		if person {
			if r.State != reclaim.Pending {
				return nil, nil
			}
			at := v.Until.UTC().Format(time.RFC3339)
			c.State, c.Snooze = reclaim.Snoozed, &reclaim.Snooze{Silence: v.SilenceID, By: v.By, Until: v.Until}
			c.NextTry, c.Reason = v.Until, "snoozed by "+v.By+" until "+at
			return c, event("snoozed", "until "+at+", silence "+v.SilenceID, v.By)
		}
		if r.State != reclaim.Pending && r.State != reclaim.Acting && r.State != reclaim.Snoozed {
			return nil, nil
		}
		c.State, c.Reason = reclaim.Snoozed, v.Why
		if c.Snooze == nil { // c is a clone: its Snooze is its own
			c.Snooze = &reclaim.Snooze{}
		}
		c.Snooze.Until, c.NextTry = v.Silence.Until, v.Silence.Until
		if v.Silence.Until.IsZero() {
			c.NextTry = now.Add(inhibitedWait) // an inhibition says no end
		}
		return c, event("snoozed", v.Silence.Reason, "")

	case DoKeep:
		if !person || r.State != reclaim.Pending && r.State != reclaim.Snoozed {
			return nil, nil
		}
		c.State, c.Reason, c.Closed = reclaim.Exempt, "kept by "+v.By, now
		c.Snooze = &reclaim.Snooze{Silence: v.SilenceID, By: v.By, Until: v.Until}
		c.Final.Sent = true // the kept message says it all
		return c, event("kept", "silence "+v.SilenceID+" until the workload ends (at most "+v.Until.UTC().Format(time.RFC3339)+")", v.By)

	case DoReleaseNow:
		if !person || r.State != reclaim.Pending && r.State != reclaim.Snoozed {
			return nil, nil
		}
		c.State, c.ActAt, c.NextTry, c.ReleaseAskedBy = reclaim.Pending, now, time.Time{}, v.By
		c.Warning.Sent = true // the owner pressed the button on it
		c.Reason = "released by " + v.By + ": acting now"
		return c, event("released", "by the owner: acting now", v.By)

	case DoDone:
		if r.State != reclaim.Acting {
			return nil, nil
		}
		end(c, reclaim.Done, v.Why, now)
		c.SharedWith = v.Shared
		return c, event(string(reclaim.Done), v.Why, actor(v))

	case DoNotReleased:
		if r.State != reclaim.Acting {
			return nil, nil
		}
		end(c, reclaim.NotReleased, v.Why, now)
		c.StopInPlace = v.StopInPlace
		return c, event(string(reclaim.NotReleased), v.Why, actor(v))
	}
	return nil, nil // DoGather and DoAct change no record
}

// arrive is a new episode's first verdict, written into c: exempt,
// notify only, or pending its warning.
func arrive(c *reclaim.Reclaim, v Verdict, now time.Time) (*reclaim.Reclaim, []reclaim.Event) {
	switch v.Do {
	case DoExempt:
		exempt(c, v.Why, now)
	case DoNotify:
		c.State, c.Reason, c.Closed = reclaim.Notified, v.Why, now
		c.Final.Sent = true
	case DoWarn:
		c.State, c.ActAt, c.Reason = reclaim.Pending, now.Add(v.Grace), v.Why
	default:
		return nil, nil
	}
	if c.Policy == "" {
		return c, nil // no policy matched: nothing was decided for anyone
	}
	// Concatenated: one allocation a new alert, where Sprintf took four.
	return c, []reclaim.Event{newEvent(c, now, "decided", string(c.State)+": policy "+c.Policy+", action "+string(c.Action), "alertmanager")}
}

func exempt(c *reclaim.Reclaim, why string, now time.Time) {
	c.State, c.Reason, c.Closed = reclaim.Exempt, why, now
	c.Warning.Sent, c.Final.Sent = true, true
}

// end closes a reclaim in a terminal state. The owner hears of a cancel
// only if they were warned of something.
func end(c *reclaim.Reclaim, st reclaim.State, why string, now time.Time) {
	c.State, c.Reason, c.Closed, c.NextTry, c.ActingSince = st, why, now, time.Time{}, time.Time{}
	if st == reclaim.DryRun || (st == reclaim.Done && c.ActedAt.IsZero()) {
		c.ActedAt = now
	}
	if st == reclaim.Done && !c.ReleaseBy.IsZero() {
		c.ReleasedAt = now // seen released, now
	}
	c.Final.Sent = st == reclaim.Cancelled && !c.Warning.Sent
}

// actor is who the record names for a verdict: the reclaimer unless
// someone else gave it.
func actor(v Verdict) string {
	if v.By != "" {
		return v.By
	}
	return "reclaimer"
}

// Takes says whether a person's verdict (DoSnooze, DoKeep, DoReleaseNow)
// applies to r where it stands: a button asks before it makes a silence.
func Takes(r *reclaim.Reclaim, d Do) bool {
	next, _ := transition(r, Verdict{Do: d, By: "someone"}, time.Time{})
	return next != nil
}

func newEvent(r *reclaim.Reclaim, now time.Time, kind, detail, actor string) reclaim.Event {
	return reclaim.Event{Time: now, Reclaim: r.ID, Kind: kind, Target: r.Target.UnitAndHolder(), Detail: detail, Actor: actor}
}
